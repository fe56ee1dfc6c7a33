import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import StorageProtocol

/// `GET /v1.0/namespaces/{ns}/changes`: the namespace's change feed (`ChangeFeed`), for a token
/// with read on it.
///
/// - `since=CURSOR`: the changes after it (without: none, and the feed's head to start from);
/// - `wait=SECONDS` (0–60, default 0): a long poll — with nothing new, answer when something comes
///   or the time is up;
/// - `limit=N` (1–1000, default 1000);
/// - `stream=true`: Server-Sent Events instead, open until the client goes: an event `changes`
///   (data: a `ChangesResponse`, id: its cursor) whenever there are some, `reset` when the
///   cursor is too old, and a comment every 15 s. `Last-Event-ID` stands for `since`.
///
/// Changes this server makes wake waiting readers at once (`ChangeSignal`); those of other
/// replicas are found by looking again every `changePollInterval`.
extension StowService {
    func addChangeRoutes(to router: Router<BasicRequestContext>) {
        router.get("\(Routes.prefix)/v1.0/namespaces/:ns/changes") { req, ctx in try await self.changeFeed(req, ctx) }
    }

    struct FeedRequest {
        var ns: Namespace
        var cursor: ChangeCursor?
        var wait: Duration
        var limit: Int
        var stream: Bool
    }

    func changeFeed(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        let ns = try namespace(context)
        try authorize(request, ns.name, .read)
        let q = request.uri.queryParameters
        let stream = q["stream"].map { $0 == "true" || $0 == "1" } ?? false
        var sinceText = q["since"].map(String.init)
        if sinceText == nil, stream, let last = request.headers[HTTPField.Name("Last-Event-ID")!] { sinceText = last }
        var cursor: ChangeCursor?
        if let sinceText, !sinceText.isEmpty {
            guard let c = ChangeCursor(sinceText) else { throw APIError.badRequest("`since` is not a cursor this server gave out") }
            cursor = c
        }
        var wait = Duration.zero
        if let w = q["wait"] {
            guard let n = HTTPNumber.nonNegative(w), n <= 60 else { throw APIError.badRequest("`wait` must be 0 to 60 seconds") }
            wait = .seconds(n)
        }
        var limit = 1000
        if let l = q["limit"] {
            guard let n = HTTPNumber.nonNegative(l), (1...1000).contains(n) else { throw APIError.badRequest("`limit` must be 1 to 1000") }
            limit = Int(n)
        }
        guard try await store.namespace(ns) != nil else { throw StoreError.namespaceNotFound(ns) }
        let feed = FeedRequest(ns: ns, cursor: cursor, wait: wait, limit: limit, stream: stream)
        return stream ? streamChanges(feed) : json(try await nextChanges(feed, until: .now + wait))
    }

    /// The changes after the request's cursor; with none yet, waits for some until `deadline`.
    func nextChanges(_ feed: FeedRequest, until deadline: ContinuousClock.Instant) async throws -> ChangesResponse {
        var cursor = feed.cursor
        while true {
            let generation = changeSignal.generation
            let batch = try await store.changes(feed.ns, after: cursor, limit: feed.limit)
            let now = ContinuousClock.now
            if batch.reset || !batch.changes.isEmpty || cursor == nil || now >= deadline || changeSignal.isClosed || Task.isCancelled {
                return ChangesResponse(cursor: batch.cursor.text, reset: batch.reset, changes: batch.changes)
            }
            cursor = batch.cursor
            await changeSignal.wait(after: generation, timeout: min(config.changePollInterval, deadline - now))
        }
    }

    func streamChanges(_ feed: FeedRequest) -> Response {
        let headers: HTTPFields = [
            .contentType: "text/event-stream", .cacheControl: "no-cache",
            // nginx passes the events on as they come (no response buffering for this answer).
            HTTPField.Name("X-Accel-Buffering")!: "no",
        ]
        let service = self
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody { writer in
                var feed = feed
                var lastWrite = ContinuousClock.now
                if feed.cursor == nil {
                    let head = try await service.store.changes(feed.ns, after: nil, limit: 1)
                    try await writer.write(Self.event("head", ChangesResponse(cursor: head.cursor.text, reset: false, changes: [])))
                    feed.cursor = head.cursor
                }
                while !service.changeSignal.isClosed && !Task.isCancelled {
                    let answer = try await service.nextChanges(feed, until: .now + .seconds(15))
                    feed.cursor = ChangeCursor(answer.cursor)
                    if answer.reset {
                        try await writer.write(Self.event("reset", answer))
                        lastWrite = .now
                    } else if !answer.changes.isEmpty {
                        try await writer.write(Self.event("changes", answer))
                        lastWrite = .now
                    } else if ContinuousClock.now - lastWrite >= .seconds(15) {
                        // Keeps the connection (and any proxy on the way) from timing out; finds a gone client.
                        try await writer.write(ByteBuffer(string: ": keepalive\n\n"))
                        lastWrite = .now
                    }
                }
                try await writer.finish(nil)
            })
    }

    /// One Server-Sent Event: its name, the cursor as its id, the answer as JSON on one line.
    static func event(_ name: String, _ answer: ChangesResponse) -> ByteBuffer {
        let data = String(decoding: WireJSON.encode(answer), as: UTF8.self)
        return ByteBuffer(string: "event: \(name)\nid: \(answer.cursor)\ndata: \(data)\n\n")
    }
}
