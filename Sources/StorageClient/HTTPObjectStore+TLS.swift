import Foundation
import NIOSSL

/// https: which certificates the client trusts, and TLS failures said in words a user can act on.
///
/// An `https` endpoint is verified against `Configuration.caFile` when it is given (a private
/// CA), else against the system's trust store; the certificate must name the host (or, for an IP
/// address, carry it as an IP subject alternative name). A failure is a `StorageError` of kind
/// `tlsFailure`, which is not retried:
///
/// ```
/// the server's certificate does not verify against the CA file /etc/stowfs/ca.pem: …
/// ```
extension HTTPObjectStore {
    /// The client's TLS settings with the CA file's certificates as the only trust roots.
    static func tlsConfiguration(caFile: String) -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        // Loaded now; a file that does not load is given to NIOSSL as is, and the first
        // connection fails with `tlsFailure` naming it (`checkCAFile` says why beforehand).
        let certificates = (try? NIOSSLCertificate.fromPEMFile(caFile)) ?? []
        tls.trustRoots = certificates.isEmpty ? .file(caFile) : .certificates(certificates)
        return tls
    }

    /// Checks that `path` is a PEM file with at least one certificate, as `Configuration.caFile` needs.
    /// - Returns: how many certificates it holds.
    /// - Throws: `StorageError` of kind `tlsFailure` saying what is wrong with the file.
    @discardableResult
    public static func checkCAFile(_ path: String) throws(StorageError) -> Int {
        guard FileManager.default.fileExists(atPath: path) else { throw StorageError(.tlsFailure, "the CA file \(path) does not exist") }
        guard FileManager.default.isReadableFile(atPath: path) else {
            throw StorageError(.tlsFailure, "the CA file \(path) cannot be read (permissions?)")
        }
        let certificates = (try? NIOSSLCertificate.fromPEMFile(path)) ?? []
        guard !certificates.isEmpty else {
            throw StorageError(.tlsFailure, "the CA file \(path) holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
        }
        return certificates.count
    }

    /// What the client verifies the server's certificate against, as the error messages name it.
    var trustDescription: String {
        configuration.caFile.map { "the CA file \($0)" } ?? "the system's trust store"
    }

    /// A TLS failure as a `StorageError` of kind `tlsFailure`; nil for any other error.
    func tlsError(_ error: any Error) -> StorageError? {
        let host = URL(string: configuration.endpoint)?.host ?? configuration.endpoint
        if let e = error as? NIOSSLExtraError, e == .failedToValidateHostname {
            return StorageError(.tlsFailure, "the server's certificate does not verify against \(trustDescription): it is not made out to \(host)")
        }
        switch error as? NIOSSLError {
        case .handshakeFailed(.sslError(let stack)), .handshakeFailed(.unknownError(let stack)):
            let text = stack.map { String(describing: $0) }.joined(separator: "; ")
            if text.contains("CERTIFICATE_VERIFY_FAILED") {
                return StorageError(
                    .tlsFailure,
                    "the server's certificate does not verify against \(trustDescription): it is not signed by a certificate authority "
                        + "trusted there, or it has expired or is not yet valid")
            }
            if text.contains("WRONG_VERSION_NUMBER") || text.contains("HTTP_REQUEST") || text.contains("PACKET_LENGTH_TOO_LONG") {
                return StorageError(
                    .tlsFailure, "the server at \(configuration.endpoint) does not speak TLS: if it serves plain http, use an http:// endpoint")
            }
            return StorageError(.tlsFailure, "the TLS handshake with \(configuration.endpoint) failed: \(text)")
        case .failedToLoadCertificate, .noSuchFilesystemObject:
            guard let caFile = configuration.caFile else { return nil }
            return StorageError(.tlsFailure, "the CA file \(caFile) cannot be used: it is missing or holds no PEM certificate")
        default:
            return nil
        }
    }
}
