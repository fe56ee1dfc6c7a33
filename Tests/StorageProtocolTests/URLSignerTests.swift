import Foundation
import StorageProtocol
import Testing

@Suite("URL signing")
struct URLSignerTests {
    let signer = URLSigner(secret: Data(repeating: 7, count: 32))
    let resource = "cdn/photos/a.jpg"

    @Test("a signature verifies for its own scope, resource and expiry")
    func valid() throws {
        let sig = signer.signature(scope: .read, resource: resource, expires: 2000)
        try signer.verify(sig, scope: .read, resource: resource, expires: 2000, now: 1000)
    }

    @Test("an expired signature is refused as expired")
    func expired() {
        let sig = signer.signature(scope: .read, resource: resource, expires: 2000)
        #expect(throws: URLSigner.Rejection.expired) { try signer.verify(sig, scope: .read, resource: resource, expires: 2000, now: 2000) }
    }

    @Test("changing anything signed invalidates the signature")
    func tampered() {
        let sig = signer.signature(scope: .read, resource: resource, expires: 2000)
        #expect(throws: URLSigner.Rejection.invalid) { try signer.verify(sig, scope: .upload, resource: resource, expires: 2000, now: 1000) }
        #expect(throws: URLSigner.Rejection.invalid) { try signer.verify(sig, scope: .read, resource: "cdn/photos/b.jpg", expires: 2000, now: 1000) }
        #expect(throws: URLSigner.Rejection.invalid) { try signer.verify(sig, scope: .read, resource: resource, expires: 3000, now: 1000) }
        let other = URLSigner(secret: Data(repeating: 8, count: 32))
        #expect(throws: URLSigner.Rejection.invalid) { try other.verify(sig, scope: .read, resource: resource, expires: 2000, now: 1000) }
    }

    @Test("garbage and missing signatures are refused")
    func garbage() {
        #expect(throws: URLSigner.Rejection.invalid) { try signer.verify("not-base64!!", scope: .read, resource: resource, expires: 2000, now: 1000) }
        #expect(throws: URLSigner.Rejection.invalid) { try signer.verify("AAAA", scope: .read, resource: resource, expires: 2000, now: 1000) }
        #expect(throws: URLSigner.Rejection.missing) { try signer.verify(nil, scope: .read, resource: resource, expires: 2000, now: 1000) }
        #expect(throws: URLSigner.Rejection.missing) { try signer.verify("x", scope: .read, resource: resource, expires: nil, now: 1000) }
    }

    @Test("base64url round-trips bytes that standard base64 would spell with + and /")
    func base64url() throws {
        let data = Data([0xfb, 0xff, 0xbf, 0x00, 0x01])
        let text = Base64URL.encode(data)
        #expect(!text.contains("+") && !text.contains("/") && !text.contains("="))
        #expect(Base64URL.decode(text) == data)
    }
}
