import Foundation
import Synchronization
import StorageClient
import StorageProtocol

/// Extended attributes: tags and metadata as `user.*` names.
///
/// | name | meaning |
/// | --- | --- |
/// | `user.tags` | the file's tags, comma-separated |
/// | `user.stow.content-type` | its content type (writable) |
/// | `user.stow.public` | `true` / `false` (writable) |
/// | `user.stow.id`, `user.stow.url`, `user.stow.status` | read-only: record id, a shareable URL, pending / uploading / stored / failed |
/// | any other `user.X` | custom metadata key `X`; its value is any bytes (`XattrValue`) |
///
/// `listxattr` lists only what a user set (tags and custom metadata): the others are readable by
/// name, and listing them would make `cp -a`, `rsync -X` and `tar --xattrs` copy them (and fail
/// on the read-only ones).
extension StowFileSystem {
    public enum XattrFlag: Sendable { case any, create, replace }

    static let tagsName = "user.tags"
    static let contentTypeName = "user.stow.content-type"
    static let publicName = "user.stow.public"
    static let idName = "user.stow.id"
    static let urlName = "user.stow.url"
    static let statusName = "user.stow.status"
    static let readOnlyNames: Set<String> = [idName, urlName, statusName]

    /// The inode, its metadata refreshed from the server first when its attributes expired (or
    /// the change feed said it changed).
    func freshInode(_ ino: InodeNumber) async throws(FSError) -> InodeEntry {
        let stale = try state.withLock { (s: inout State) throws(FSError) -> Bool in
            let e = try inode(s, ino)
            return !e.hasLocalState && e.validUntil <= .now && e.remote != nil
        }
        if stale { _ = try await getattr(ino) }
        return try state.withLock { (s: inout State) throws(FSError) in try inode(s, ino) }
    }

    public func listxattr(_ ino: InodeNumber) async throws(FSError) -> [String] {
        let e = try await freshInode(ino)
        var names: [String] = []
        if !e.meta.tags.isEmpty { names.append(Self.tagsName) }
        names += e.meta.metadata.keys.map { "user." + $0 }.sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        return names
    }

    public func getxattr(_ ino: InodeNumber, name: String) async throws(FSError) -> [UInt8] {
        // Only user.* names exist here: other namespaces (security.*, system.posix_acl_*, trusted.*)
        // are not supported, as setxattr says. ENOTSUP rather than ENODATA also tells `ls -l`
        // (coreutils remembers it per device) to stop asking every file for its SELinux label and
        // ACL: two FUSE round trips per file less.
        guard name.hasPrefix("user.") else { throw FSError.notSupported }
        let e = try await freshInode(ino)
        switch name {
        case Self.tagsName:
            guard !e.meta.tags.isEmpty else { throw FSError.noAttribute }
            return Array(e.meta.tags.joined(separator: ",").utf8)
        case Self.contentTypeName:
            let type = e.meta.contentType ?? (e.kind == .directory ? "inode/directory" : ContentTypes.infer(fileName: e.name))
            return Array(type.utf8)
        case Self.publicName:
            return Array((e.meta.isPublic ? "true" : "false").utf8)
        case Self.statusName:
            return Array(try await uploadStatus(ino).utf8)
        case Self.idName:
            // A namespace's root has no record of its own, nor an id.
            let namespaceRoot = ino == .root || (configuration.scope == .all && e.parent == .root)
            guard let r = e.remote, !namespaceRoot else { throw FSError.noAttribute }
            return Array(FileRecord.id(inode: r.ino).utf8)
        case Self.urlName:
            return Array(try await shareableURL(ino).utf8)
        default:
            guard let v = e.meta.metadata[String(name.dropFirst(5))] else { throw FSError.noAttribute }
            return XattrValue.decode(v)
        }
    }

    public func setxattr(_ ino: InodeNumber, name: String, value: [UInt8], flag: XattrFlag) async throws(FSError) {
        guard !configuration.readOnly else { throw FSError.readOnly }
        guard name.hasPrefix("user.") else { throw FSError.notSupported }
        guard !Self.readOnlyNames.contains(name) else { throw FSError.notPermitted }
        // Tags, content type and public are text; custom metadata is any bytes.
        let text = String(validating: value, as: UTF8.self).flatMap { $0.utf8.contains(0) ? nil : $0 }
        let exists = (try? await getxattr(ino, name: name)) != nil
        if flag == .create && exists { throw FSError.exists }
        if flag == .replace && !exists { throw FSError.noAttribute }
        var patch = FilePatch()
        switch name {
        case Self.tagsName:
            guard let text else { throw FSError.invalidArgument }
            let tags = text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            guard tags.allSatisfy(AttributeRules.isValidTag), tags.count <= AttributeRules.maxTags else { throw FSError.invalidArgument }
            patch.tags = tags
        case Self.contentTypeName:
            guard let text, ContentTypes.isValid(text) else { throw FSError.invalidArgument }
            patch.contentType = text
        case Self.publicName:
            guard let text else { throw FSError.invalidArgument }
            switch text.lowercased().trimmingCharacters(in: .whitespacesAndNewlines) {
            case "true", "1", "yes": patch.isPublic = true
            case "false", "0", "no", "": patch.isPublic = false
            default: throw FSError.invalidArgument
            }
        default:
            let key = String(name.dropFirst(5))
            guard AttributeRules.isValidMetadataKey(key) else { throw FSError.invalidArgument }
            let stored = XattrValue.encode(value)
            guard AttributeRules.isValidMetadataValue(stored) else { throw FSError.attributeTooLarge }
            let count = state.withLock { $0.inodes[ino]?.meta.metadata.count ?? 0 }
            if !exists && count >= AttributeRules.maxMetadataKeys { throw FSError.noSpace }
            patch.metadataSet = [key: stored]
        }
        try await applyMeta(ino, patch)
    }

    public func removexattr(_ ino: InodeNumber, name: String) async throws(FSError) {
        guard !configuration.readOnly else { throw FSError.readOnly }
        guard name.hasPrefix("user.") else { throw FSError.noAttribute }
        guard !Self.readOnlyNames.contains(name) else { throw FSError.notPermitted }
        _ = try await getxattr(ino, name: name)
        var patch = FilePatch()
        switch name {
        case Self.tagsName: patch.tags = []
        case Self.contentTypeName: patch.contentType = ContentTypes.fallback
        case Self.publicName: patch.isPublic = false
        default: patch.metadataRemove = [String(name.dropFirst(5))]
        }
        try await applyMeta(ino, patch)
    }

    /// Applies a metadata change locally, then with the owed upload or on the server.
    func applyMeta(_ ino: InodeNumber, _ patch: FilePatch) async throws(FSError) {
        try await lockedInode(ino) { () async throws(FSError) in try await self.applyMetaLocked(ino, patch) }
    }

    private func applyMetaLocked(_ ino: InodeNumber, _ patch: FilePatch) async throws(FSError) {
        let (owed, location, local) = try state.withLock { (s: inout State) throws(FSError) -> ([Int64], Location, Bool) in
            var e = try inode(s, ino)
            if let t = patch.tags { e.meta.tags = t }
            if let c = patch.contentType { e.meta.contentType = c }
            if let p = patch.isPublic { e.meta.isPublic = p }
            for (k, v) in patch.metadataSet ?? [:] { e.meta.metadata[k] = v }
            for k in patch.metadataRemove ?? [] { e.meta.metadata[k] = nil }
            e.attributes.ctime = .now
            e.changedAt = .now
            s.inodes[ino] = e
            return (e.owedUploads + (e.local?.heldUpload.map { [$0] } ?? []), try self.location(s, ino), e.hasLocalState)
        }
        if local, try await amendOwed(ino, owed, patch: patch) { return }
        // Unlinked here (still open): kept here, as its attributes are (`applyAttributes`).
        if state.withLock({ $0.inodes[ino]?.unlinked == true }) { return }
        guard let ns = location.namespace, !location.path.isRoot else { throw FSError.notSupported }
        let record = try await remote { try await store.update(ns, location.path, patch, ifMatch: nil) }
        state.withLock { s in applyUpdated(&s, ino, record) }
    }

    /// pending (owed, waiting), uploading (being sent), failed (refused, kept and retried), stored.
    func uploadStatus(_ ino: InodeNumber) async throws(FSError) -> String {
        let e = try state.withLock { (s: inout State) throws(FSError) in try inode(s, ino) }
        if e.local?.dirty == true { return "pending" }
        let owed = e.owedUploads
        if owed.isEmpty { return e.remote != nil ? "stored" : "pending" }
        for id in owed where await queue.isRunning(id) { return "uploading" }
        for id in owed where await queue.record(id)?.state == .failed { return "failed" }
        return "pending"
    }

    /// A URL to share: the public CDN URL of a public file, else a signed URL valid 7 days.
    /// A file still owed to the server is uploaded first.
    func shareableURL(_ ino: InodeNumber) async throws(FSError) -> String {
        if state.withLock({ $0.inodes[ino]?.hasLocalState }) == true {
            try await submit(ino, onlyIfClosed: false)
            let owed = state.withLock { $0.inodes[ino]?.owedUploads ?? [] }
            try await waitForUploads(Set(owed))
        }
        let (location, isPublic) = try state.withLock { (s: inout State) throws(FSError) -> (Location, Bool) in
            (try self.location(s, ino), try inode(s, ino).meta.isPublic)
        }
        guard let ns = location.namespace, !location.path.isRoot else { throw FSError.noAttribute }
        let signed = try await remote { try await store.signedURLs(ns, [location.path], expiry: 7 * 24 * 3600 - 60) }
        guard let url = signed.first?.signedUrl else { throw FSError.noAttribute }
        return isPublic ? String(url.split(separator: "?").first ?? Substring(url)) : url
    }
}
