import Foundation
import Hummingbird
import StorageProtocol

/// `GET …/namespaces/{ns}/search`: files by tags, name, path, type, visibility, size, time and metadata.
extension StowService {
    func addSearchRoutes(to router: Router<BasicRequestContext>) {
        router.get("\(Routes.prefix)/v1.0/namespaces/:ns/search") { req, ctx in
            let ns = try self.namespace(ctx)
            try self.authorize(req, ns.name, .read)
            let items = req.uri.queryParameters.map { (String($0.key), String($0.value)) }
            let filter: SearchFilter
            do { filter = try SearchFilter.parse(items) } catch { throw APIError.badRequest("\(error)") }
            var limit = SearchFilter.defaultLimit
            var cursor: SearchCursor?
            for (key, value) in items {
                switch key {
                case "limit":
                    guard let n = Int(value), (1...SearchFilter.maxLimit).contains(n) else {
                        throw APIError.badRequest("`limit` must be a whole number in 1...\(SearchFilter.maxLimit)")
                    }
                    limit = n
                case "cursor":
                    guard let c = SearchCursor(encoded: value) else { throw APIError.badRequest("`cursor` is not one this server gave out") }
                    cursor = c
                default:
                    continue
                }
            }
            let page = try await self.store.search(ns, filter, after: cursor, limit: limit)
            let base = self.baseURL(req)
            return self.json(SearchResponse(items: page.nodes.map { self.record($0, base: base) }, nextCursor: page.next?.encoded))
        }
    }
}
