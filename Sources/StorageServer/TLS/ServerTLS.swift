import Foundation
import NIOSSL

/// The TLS setup of an https stowd: its certificate chain and key, loaded and checked at start, so
/// that a file that cannot serve stops the server with its name instead of failing every handshake.
enum ServerTLS {
    /// Loads the PEM files and checks that the key belongs to the certificate.
    /// - Throws: `ServerError` naming the file and what is wrong with it.
    static func configuration(_ files: ServerConfiguration.TLSFiles) throws(ServerError) -> TLSConfiguration {
        let (chain, keyFile) = (files.certificateChain, files.privateKey)
        try checkReadable(chain, what: "TLS certificate")
        try checkReadable(keyFile, what: "TLS key")
        guard let certificates = try? NIOSSLCertificate.fromPEMFile(chain), !certificates.isEmpty else {
            throw ServerError(message: "the TLS certificate \(chain) holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
        }
        guard let key = try? NIOSSLPrivateKey(file: keyFile, format: .pem) else {
            throw ServerError(message: "the TLS key \(keyFile) is not an unencrypted PEM private key (-----BEGIN PRIVATE KEY-----)")
        }
        let configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: certificates.map { .certificate($0) }, privateKey: .privateKey(key))
        do {
            _ = try NIOSSLContext(configuration: configuration)
        } catch {
            throw ServerError(
                message: "the TLS key \(keyFile) does not go with the certificate \(chain) (the first certificate must be the server's own): \(error)")
        }
        return configuration
    }

    private static func checkReadable(_ path: String, what: String) throws(ServerError) {
        guard FileManager.default.fileExists(atPath: path) else { throw ServerError(message: "the \(what) \(path) does not exist") }
        guard FileManager.default.isReadableFile(atPath: path) else {
            throw ServerError(message: "the \(what) \(path) cannot be read (permissions?)")
        }
    }
}
