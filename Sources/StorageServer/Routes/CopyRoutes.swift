import AsyncHTTPClient
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import NIOHTTP1
import StorageProtocol

/// The tasks of `uploads/copy`, kept in memory (a restart forgets them; their files stay).
///
/// Bounded: a finished task is forgotten an hour after it ended, at most `maxTasks` are kept (the
/// oldest finished go first), and a new task is refused (503) while that many are still running.
actor CopyTasks {
    static let maxTasks = 1000
    static let keepFinished: Int64 = 3600  // seconds
    private var tasks: [String: (namespace: Namespace, task: CopyTask, endedAt: Int64?)] = [:]

    /// Records a new task; false (and nothing recorded) when `maxTasks` are still running.
    func put(_ task: CopyTask, namespace: Namespace, now: Int64 = Timestamp.nowSeconds()) -> Bool {
        tasks = tasks.filter { $0.value.endedAt.map { now - $0 < Self.keepFinished } ?? true }
        if tasks.count >= Self.maxTasks {
            let finished = tasks.filter { $0.value.endedAt != nil }.sorted { $0.value.endedAt! < $1.value.endedAt! }
            guard let oldest = finished.first else { return false }
            tasks[oldest.key] = nil
        }
        tasks[task.id] = (namespace, task, nil)
        return true
    }

    func get(_ id: String) -> (namespace: Namespace, task: CopyTask)? { tasks[id].map { ($0.namespace, $0.task) } }

    func update(_ id: String, _ change: (inout CopyTask) -> Void) {
        guard var entry = tasks[id] else { return }
        change(&entry.task)
        if entry.task.state == "completed" || entry.task.state == "failed" { entry.endedAt = entry.endedAt ?? Timestamp.nowSeconds() }
        tasks[id] = entry
    }

    var count: Int { tasks.count }
}

/// `POST /v1.0/uploads/copy`: fetch files from URLs into a namespace.
///
/// Only hosts on the operator's allowlist (`--copy-allow-host`, empty by default) are fetched,
/// a redirect is followed only to a host on it too (at most 3: a stowd whose files are in an
/// object store redirects downloads there), and the whole request is refused before anything is
/// fetched if any URL points elsewhere: the server must not become a way to reach internal addresses.
extension StowService {
    func addCopyRoutes(to router: Router<BasicRequestContext>, http: HTTPClient) {
        router.post(RouterPath(Routes.copy)) { req, _ in try await self.copy(req, http: http) }
        router.get("\(Routes.copy)/:id") { req, ctx in
            let id = ctx.parameters.get("id") ?? ""
            guard let entry = await self.copies.get(id) else { throw APIError.notFound("no copy task \(id)") }
            try self.authorize(req, entry.namespace.name, .read)
            return self.json(entry.task)
        }
    }

    func copy(_ request: Request, http: HTTPClient) async throws -> Response {
        let body = try await decode(CopyRequest.self, from: request)
        let ns = try Namespace(body.destination.namespace)
        try authorize(request, ns.name, .write)
        guard !body.urls.isEmpty, body.urls.count <= 100 else { throw APIError.badRequest("`urls` must hold 1 to 100 URLs") }
        var jobs: [(url: String, path: StoragePath)] = []
        for raw in body.urls {
            guard let url = URL(string: raw), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil
            else { throw APIError.badRequest("`\(raw)` is not an http(s) URL") }
            if let refused = copyRefusal(url) { throw APIError.forbidden(refused) }
            var name = url.lastPathComponent
            if name.isEmpty || name == "/" { name = "index" }
            let target: String
            if let rewrite = body.destination.rewrite, !rewrite.isEmpty {
                target = rewrite.replacingOccurrences(of: "{{name}}", with: name)
            } else if let basepath = body.destination.basepath, !basepath.isEmpty, basepath != "/" {
                target = (basepath.hasSuffix("/") ? basepath : basepath + "/") + name
            } else {
                target = name
            }
            jobs.append((raw, try StoragePath(target)))
        }
        guard try await store.namespace(ns) != nil else { throw StoreError.namespaceNotFound(ns) }
        let task = CopyTask(id: Self.newID(), progress: 0, attemptsMade: 1, state: "active", files: [], failures: [], timestamp: Timestamp.nowSeconds())
        guard await copies.put(task, namespace: ns) else {
            throw APIError(.serviceUnavailable, .unavailable, "\(CopyTasks.maxTasks) copy tasks are running; try again later")
        }
        let base = baseURL(request)
        let concurrency = max(1, min(body.configuration?.concurrency ?? 4, 16))
        let jobList = jobs
        let work = Task {
            await withTaskGroup(of: Void.self) { group in
                var next = 0
                func launch() {
                    guard next < jobList.count else { return }
                    let job = jobList[next]
                    next += 1
                    group.addTask {
                        let result: Result<FileRecord, any Error>
                        do {
                            result = .success(try await self.fetch(job.url, into: ns, job.path, http: http, base: base))
                        } catch {
                            result = .failure(error)
                        }
                        await self.copies.update(task.id) { t in
                            switch result {
                            case .success(let r): t.files.append(r)
                            case .failure(let e): t.failures.append(.init(url: job.url, message: APIError.from(e).message))
                            }
                            t.progress = (t.files.count + t.failures.count) * 100 / jobList.count
                        }
                    }
                }
                for _ in 0..<concurrency { launch() }
                while await group.next() != nil { launch() }
            }
            await self.copies.update(task.id) { t in t.state = t.failures.isEmpty ? "completed" : "failed" }
        }
        let tracking = base + Routes.copyTask(task.id)
        if request.uri.queryParameters["sync"] == "true" {
            await work.value
            let done = await copies.get(task.id)?.task ?? task
            return json(CopyResponse(trackingUrl: tracking, task: done))
        }
        return json(CopyResponse(trackingUrl: tracking, task: task), status: .accepted)
    }

    /// Why the server may not fetch from `url`'s host (nil: it may): only hosts on the allowlist.
    func copyRefusal(_ url: URL) -> String? {
        guard let host = url.host?.lowercased() else { return "`\(url)` names no host" }
        let hostPort = url.port.map { "\(host):\($0)" } ?? host
        let allowed = config.copyAllowedHosts.map { $0.lowercased() }
        guard allowed.contains(host) || allowed.contains(hostPort) else {
            return "copying from `\(hostPort)` is not allowed: the server only fetches from hosts on its allowlist (--copy-allow-host)"
        }
        return nil
    }

    /// Streams one URL into a new upload and publishes it.
    func fetch(_ url: String, into ns: Namespace, _ path: StoragePath, http: HTTPClient, base: String) async throws -> FileRecord {
        let id = Self.newID()
        var next = url
        var response = try await http.execute(HTTPClientRequest(url: next), timeout: .seconds(300))
        for _ in 0..<3 {
            guard [301, 302, 303, 307, 308].contains(response.status.code), let location = response.headers.first(name: "location") else { break }
            _ = try? await response.body.collect(upTo: 64 << 10)
            guard let target = URL(string: location, relativeTo: URL(string: next)).map(\.absoluteURL), ["http", "https"].contains(target.scheme?.lowercased() ?? "")
            else { throw APIError(.badGateway, .unavailable, "\(next) redirected to `\(location)`, which is not an http(s) URL") }
            if let refused = copyRefusal(target) { throw APIError(.badGateway, .forbidden, "\(next) redirected elsewhere: \(refused)") }
            next = target.absoluteString
            response = try await http.execute(HTTPClientRequest(url: next), timeout: .seconds(300))
        }
        guard response.status == .ok else { throw APIError(.badGateway, .unavailable, "\(next) answered \(response.status.code)") }
        let contentType = response.headers.first(name: "content-type").flatMap { ContentTypes.isValid($0) ? $0 : nil }
        var writer = try await openStagedHashing(id, expecting: nil)
        do {
            for try await chunk in response.body {
                guard writer.offset + Int64(chunk.readableBytes) <= config.maxUploadSize else { throw BlobStoreError.tooLarge(limit: config.maxUploadSize) }
                try await writer.write(chunk)
            }
        } catch {
            await writer.abandon()
            try? await blobs.deleteStaged(id)
            activeUploads.forget(id)
            throw error
        }
        let size = try await writer.finish()
        do {
            let upload = try await createUpload(
                id: id, ns: ns, path: path, size: size, contentType: contentType, tags: nil, params: UploadParams(), autoComplete: false)
            return record(try await finish(upload), base: base)
        } catch {
            try? await blobs.deleteStaged(id)
            activeUploads.forget(id)
            throw error
        }
    }
}
