import Foundation
import NIOCore

/// A streaming multipart/form-data parser (RFC 7578): fed body chunks, it emits part headers and
/// part content as it goes, holding back only what could be the start of a boundary.
struct MultipartParser {
    enum Event: Equatable {
        case headers([String: String])
        case data(ByteBuffer)
        case partEnd
    }

    struct Malformed: Error, CustomStringConvertible {
        var description: String
    }

    private enum State {
        case preamble
        case afterBoundary
        case headers
        case body
        case done
    }

    private let delimiter: [UInt8]
    private var buffer = ByteBuffer()
    private var state = State.preamble
    private static let maxHeaderBytes = 16 * 1024

    init(boundary: String) {
        delimiter = Array("\r\n--\(boundary)".utf8)
        // The first boundary has no CRLF before it; pretend it had.
        buffer.writeString("\r\n")
    }

    var isDone: Bool { state == .done }

    /// The boundary of a `multipart/form-data; boundary=…` content type.
    static func boundary(contentType: String) -> String? {
        let parts = contentType.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
        guard parts.first?.lowercased() == "multipart/form-data" else { return nil }
        for p in parts.dropFirst() where p.lowercased().hasPrefix("boundary=") {
            var b = String(p.dropFirst("boundary=".count))
            if b.hasPrefix("\"") && b.hasSuffix("\"") && b.count >= 2 { b = String(b.dropFirst().dropLast()) }
            return (1...70).contains(b.utf8.count) ? b : nil
        }
        return nil
    }

    /// Feeds a chunk; returns the events it completes.
    mutating func feed(_ chunk: ByteBuffer) throws -> [Event] {
        var chunk = chunk
        buffer.writeBuffer(&chunk)
        var events: [Event] = []
        while true {
            switch state {
            case .done:
                buffer.clear()
                return events
            case .preamble:
                guard let at = find(delimiter) else {
                    // Keep what could be the start of the delimiter.
                    let keep = min(buffer.readableBytes, delimiter.count - 1)
                    buffer.moveReaderIndex(forwardBy: buffer.readableBytes - keep)
                    buffer.discardReadBytes()
                    return events
                }
                buffer.moveReaderIndex(forwardBy: at + delimiter.count)
                state = .afterBoundary
            case .afterBoundary:
                guard buffer.readableBytes >= 2 else { return events }
                let two = buffer.getBytes(at: buffer.readerIndex, length: 2)!
                if two == [45, 45] {  // "--": the closing boundary
                    state = .done
                } else if two == [13, 10] {
                    buffer.moveReaderIndex(forwardBy: 2)
                    state = .headers
                } else {
                    throw Malformed(description: "a boundary is followed by neither CRLF nor `--`")
                }
            case .headers:
                guard let end = find([13, 10, 13, 10]) else {
                    if buffer.readableBytes > Self.maxHeaderBytes { throw Malformed(description: "part headers are too long") }
                    return events
                }
                // Never repaired: a file name of invalid UTF-8 would become another name (U+FFFD).
                guard let raw = buffer.readBytes(length: end), let text = String(validating: raw, as: UTF8.self) else {
                    throw Malformed(description: "part headers are not valid UTF-8")
                }
                buffer.moveReaderIndex(forwardBy: 4)
                var headers: [String: String] = [:]
                for line in text.split(separator: "\r\n") {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                }
                events.append(.headers(headers))
                state = .body
            case .body:
                if let at = find(delimiter) {
                    if at > 0 { events.append(.data(buffer.readSlice(length: at)!)) }
                    buffer.moveReaderIndex(forwardBy: delimiter.count)
                    events.append(.partEnd)
                    state = .afterBoundary
                } else {
                    let emit = buffer.readableBytes - min(buffer.readableBytes, delimiter.count - 1)
                    if emit > 0 { events.append(.data(ByteBuffer(buffer.readSlice(length: emit)!.readableBytesView))) }
                    buffer.discardReadBytes()
                    return events
                }
            }
        }
    }

    /// The offset (from the reader index) of the first occurrence of `needle`.
    private func find(_ needle: [UInt8]) -> Int? {
        let view = buffer.readableBytesView
        guard view.count >= needle.count, let first = needle.first else { return nil }
        var i = view.startIndex
        let last = view.endIndex - needle.count
        while i <= last {
            guard let candidate = view[i...last].firstIndex(of: first) else { return nil }
            var match = true
            for k in 1..<needle.count where view[candidate + k] != needle[k] {
                match = false
                break
            }
            if match { return candidate - view.startIndex }
            i = candidate + 1
        }
        return nil
    }
}

/// `form-data; name="file"; filename="a.txt"` → ["name": "file", "filename": "a.txt"].
func parseContentDisposition(_ value: String) -> [String: String] {
    var out: [String: String] = [:]
    for part in value.split(separator: ";").dropFirst() {
        let kv = part.split(separator: "=", maxSplits: 1)
        guard kv.count == 2 else { continue }
        var v = kv[1].trimmingCharacters(in: .whitespaces)
        if v.hasPrefix("\"") && v.hasSuffix("\"") && v.count >= 2 { v = String(v.dropFirst().dropLast()) }
        out[kv[0].trimmingCharacters(in: .whitespaces).lowercased()] = v.replacingOccurrences(of: "\\\"", with: "\"")
    }
    return out
}
