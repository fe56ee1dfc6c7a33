import Foundation
import StorageClient
import StorageProtocol
import Testing

/// docs/openapi.yaml is the source of truth of the API: every operation it lists must answer,
/// with a status it documents.
@Suite("docs/openapi.yaml matches the server")
struct OpenAPITests {
    struct Operation: CustomStringConvertible {
        var path: String
        var method: String
        var statuses: Set<Int>
        var description: String { "\(method.uppercased()) \(path)" }
    }

    static var repositoryRoot: String {
        var url = URL(fileURLWithPath: #filePath)
        while url.path != "/" && !FileManager.default.fileExists(atPath: url.path + "/Package.swift") { url.deleteLastPathComponent() }
        return url.path
    }

    /// Reads paths, methods and response codes from the document (its layout: two-space indents).
    static func operations() throws -> [Operation] {
        let text = try String(contentsOfFile: repositoryRoot + "/docs/openapi.yaml", encoding: .utf8)
        var out: [Operation] = []
        var inPaths = false
        var path: String?
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line == "paths:" { inPaths = true; continue }
            if inPaths && !line.hasPrefix(" ") && !line.isEmpty { inPaths = false }
            guard inPaths else { continue }
            if line.hasPrefix("  /") && line.hasSuffix(":") {
                path = String(line.dropFirst(2).dropLast())
            } else if let p = path, line.hasPrefix("    "), !line.hasPrefix("     "),
                let method = ["get", "put", "post", "patch", "delete", "head", "options"].first(where: { line == "    \($0):" })
            {
                out.append(Operation(path: p, method: method, statuses: []))
            } else if line.hasPrefix("        \""), let code = Int(line.dropFirst(9).prefix(3)), !out.isEmpty {
                out[out.count - 1].statuses.insert(code)
            }
        }
        return out
    }

    @Test("the document lists every route family, each with its answers")
    func parsed() throws {
        let ops = try Self.operations()
        #expect(ops.count >= 36)
        #expect(ops.allSatisfy { !$0.statuses.isEmpty }, "\(ops.filter { $0.statuses.isEmpty })")
    }

    @Test("every operation answers, with a documented status")
    func everyOperationAnswers() async throws {
        try await withServer { s in
            _ = try await s.admin.put(Array("keep".utf8), "keep.txt")
            let session = try await s.admin.startUpload(testNamespace, StartUploadRequest(fileName: "pending", size: 4))
            let link = session.upload.url
            let id = String(link.split(separator: "/").last!.split(separator: "?").first!)
            let query = String(link.split(separator: "?").last!)
            for op in try Self.operations() {
                var url = op.path.replacingOccurrences(of: "{ns}", with: "test").replacingOccurrences(of: "{path}", with: "keep.txt")
                    .replacingOccurrences(of: "{id}", with: id)
                if op.path.hasPrefix("/storage/uploads/") { url += "?" + query }
                var headers: [(String, String)] = []
                var body: Data?
                if ["post", "put", "patch"].contains(op.method) {
                    headers.append(("Content-Type", "application/json"))
                    body = Data("{}".utf8)
                }
                let answer = try await s.raw.send(op.method.uppercased(), url, headers: headers, body: body)
                #expect(answer.error?.message != "no such route", "\(op) is not routed")
                #expect(op.statuses.contains(answer.status), "\(op) answered \(answer.status), which the document does not list: \(answer.text)")
            }
        }
    }
}
