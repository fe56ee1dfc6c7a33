import Foundation
import Logging
public import HTTPTypes
public import Hummingbird
import NIOCore
import NIOFileSystem
public import StorageProtocol

/// An error answer: HTTP status plus `{"message", "code"}`. Every refusal of the server ends up as one.
public struct APIError: Error, HTTPResponseError, Sendable, CustomStringConvertible {
    public var status: HTTPResponse.Status
    public var code: ErrorCode
    public var message: String
    public var headers: HTTPFields
    /// What the server's log says and the client is not told (an internal error's own text may
    /// name files and folders of the server).
    public var detail: String?

    public init(_ status: HTTPResponse.Status, _ code: ErrorCode, _ message: String, headers: HTTPFields = [:], detail: String? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
        self.detail = detail
    }

    public var description: String { "\(status.code) \(code): \(message)" }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        var headers = self.headers
        headers[.contentType] = "application/json; charset=utf-8"
        headers[.cacheControl] = "no-store"
        let body = WireJSON.encode(ErrorBody(message: message, code: code))
        if request.method == .head {
            headers[.contentLength] = "\(body.count)"
            return Response(status: status, headers: headers, body: ResponseBody())
        }
        return Response(status: status, headers: headers, body: ResponseBody(byteBuffer: ByteBuffer(bytes: body)))
    }

    static func badRequest(_ message: String) -> APIError { APIError(.badRequest, .badRequest, message) }
    static func notFound(_ message: String) -> APIError { APIError(.notFound, .notFound, message) }
    static func forbidden(_ message: String) -> APIError { APIError(.forbidden, .forbidden, message) }
    static func conflict(_ code: ErrorCode, _ message: String) -> APIError { APIError(.conflict, code, message) }
    static let checksumStatus = HTTPResponse.Status(code: httpStatusChecksumMismatch, reasonPhrase: "Checksum Mismatch")

    /// The one table that turns the server's internal errors into answers.
    static func from(_ error: any Error) -> APIError {
        switch error {
        case let e as APIError:
            return e
        case let e as NameError:
            return APIError(.badRequest, e.code, e.description)
        case let e as StoreError:
            return from(store: e)
        case let e as BlobStoreError:
            switch e {
            case .tooLarge(let limit): return APIError(.contentTooLarge, .payloadTooLarge, "the body is larger than the \(limit) bytes allowed")
            case .noSpace: return APIError(HTTPResponse.Status(code: 507, reasonPhrase: "Insufficient Storage"), .insufficientStorage, "the server's disk is full; nothing was changed")
            case .notFound(let id): return APIError(.notFound, .notFound, "content \(id) is gone")
            case .unavailable(let why):
                // The reason (the store's answer) stays in the log; the client learns to try again.
                return unavailable("the object store is unavailable; try again", detail: why)
            case .offsetNotHeld(let offset, let held):
                return APIError(.conflict, .offsetMismatch, "the upload stands at \(held) bytes, not \(offset); resume from \(held)")
            case .conflict(let why):
                return APIError(.conflict, .conflict, why)
            }
        case let e as URLSigner.Rejection:
            switch e {
            case .missing: return .forbidden("this URL needs a signature (`expires` and `signature`)")
            case .expired: return .forbidden("the signature has expired")
            case .invalid: return .forbidden("the signature is not valid for this URL and method")
            }
        case let e as DecodingError:
            return .badRequest("malformed JSON body: \(describe(e))")
        case let e as HTTPError:
            switch e.status {
            case .contentTooLarge: return APIError(.contentTooLarge, .payloadTooLarge, "the body is too large")
            case .notFound: return APIError(.notFound, .notFound, "no such route")
            case .methodNotAllowed: return APIError(.methodNotAllowed, .methodNotAllowed, "method not allowed")
            default: return APIError(e.status, ErrorCode(rawValue: "http_\(e.status.code)"), e.body ?? e.status.reasonPhrase)
            }
        case let e as FileSystemError where e.code == .notFound:
            return APIError(.notFound, .notFound, "the content of this file is missing")
        default:
            // The error's own text stays in the log: it can name the server's files and folders.
            let reference = String(UInt32.random(in: 0...UInt32.max), radix: 16)
            return APIError(
                .internalServerError, .internalError, "internal error (reference \(reference) in the server's log)",
                detail: "reference \(reference): \(error)")
        }
    }

    static func from(store e: StoreError) -> APIError {
        switch e {
        case .namespaceNotFound, .notFound: APIError(.notFound, .notFound, e.description)
        case .exists: APIError(.conflict, .exists, e.description)
        case .notEmpty: APIError(.conflict, .notEmpty, e.description)
        case .notADirectory: APIError(.conflict, .notADirectory, e.description)
        case .isADirectory: APIError(.conflict, .isADirectory, e.description)
        case .invalidRename: APIError(.badRequest, .invalidRename, e.description)
        case .preconditionFailed: APIError(.preconditionFailed, .preconditionFailed, e.description)
        case .conflict: APIError(.conflict, .conflict, e.description)
        case .badRequest: APIError(.badRequest, .badRequest, e.description)
        case .unavailable(let why):
            // The reason stays in the log; the client learns to try again.
            unavailable("the database is unavailable; try again", detail: why)
        }
    }

    /// 503 with a reference to the log line that gives `detail`.
    static func unavailable(_ message: String, detail: String) -> APIError {
        let reference = String(UInt32.random(in: 0...UInt32.max), radix: 16)
        return APIError(.serviceUnavailable, .unavailable, "\(message) (reference \(reference) in the server's log)", detail: "reference \(reference): \(detail)")
    }

    /// A readable account of a JSON decoding failure: which field, and what was wrong.
    static func describe(_ error: DecodingError) -> String {
        func path(_ keys: [any CodingKey]) -> String {
            let p = keys.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
            return p.isEmpty ? "the body" : "`\(p)`"
        }
        switch error {
        case .keyNotFound(let key, let ctx): return "missing field `\((ctx.codingPath + [key]).map(\.stringValue).joined(separator: "."))`"
        case .typeMismatch(let type, let ctx): return "\(path(ctx.codingPath)) should be \(typeName(type))"
        case .valueNotFound(let type, let ctx): return "\(path(ctx.codingPath)) should be \(typeName(type)), not null"
        case .dataCorrupted(let ctx):
            if ctx.codingPath.isEmpty { return "not valid JSON" }
            return "\(path(ctx.codingPath)): \(ctx.debugDescription)"
        @unknown default: return "\(error)"
        }
    }

    private static func typeName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "true or false"
        case is Int.Type, is Int64.Type, is UInt32.Type, is UInt64.Type: "a number"
        default: "\(type)".contains("Array") ? "an array" : "an object"
        }
    }
}

/// Turns every error (a route's, or the router's own 404) into the API's JSON error answer.
struct ErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do {
            return try await next(request, context)
        } catch {
            let api = APIError.from(error)
            if api.status.code >= 500 { context.logger.error("\(request.method) \(request.uri.path): \(api.detail ?? api.message)") }
            return try api.response(from: request, context: context)
        }
    }
}
