public import StorageProtocol

/// How to upload a file.
public struct UploadOptions: Sendable {
    public var contentType: String?
    public var tags: [String]?
    public var params: UploadParams
    /// Files larger than this go in resumable chunks of this size; smaller ones in one PUT.
    public var chunkSize: Int64
    /// Consecutive failed sends (without any progress between them) before giving up.
    public var retry: RetryPolicy

    public init(contentType: String? = nil, tags: [String]? = nil, params: UploadParams = UploadParams(), chunkSize: Int64 = 64 << 20, retry: RetryPolicy = .default) {
        self.contentType = contentType
        self.tags = tags
        self.params = params
        self.chunkSize = max(1, chunkSize)
        self.retry = retry
    }
}

extension ObjectStore {
    /// Uploads `size` bytes from `source` to `path`: start → send → complete.
    ///
    /// A send that fails (a dropped connection, a server restart) is resumed from the offset the
    /// server reports, up to `options.retry.attempts` times in a row without progress; then the
    /// typed error is thrown and the session can still be resumed with `resumeUpload`.
    ///
    /// ```swift
    /// let record = try await store.upload(.file(path: "/tmp/a.jpg"), size: 1234, to: ns, try StoragePath("photos/a.jpg"))
    /// ```
    public func upload(
        _ source: UploadSource, size: Int64, to ns: Namespace, _ path: StoragePath, options: UploadOptions = UploadOptions(),
        progress: ProgressHandler? = nil
    ) async throws -> FileRecord {
        let session = try await startUpload(
            ns, StartUploadRequest(fileName: path.string, contentType: options.contentType, size: size, tags: options.tags, params: options.params))
        return try await resumeUpload(session, from: source, knownOffset: 0, options: options, progress: progress)
    }

    /// Sends what the server still lacks of an upload, then completes it. Safe to call again after
    /// any failure, or after a restart with a session kept from before.
    /// - Parameter knownOffset: the server's offset if known (0 for a new session); asked otherwise.
    /// - Parameter willComplete: called once every byte is on the server, just before complete (the
    ///   caller may stop cancelling from then on: a complete cut off midway may still have happened).
    public func resumeUpload(
        _ started: StartUploadResponse, from source: UploadSource, knownOffset: Int64? = nil, options: UploadOptions = UploadOptions(),
        progress: ProgressHandler? = nil, willComplete: (@Sendable () async -> Void)? = nil
    ) async throws -> FileRecord {
        var session = started
        // A declared tail of zeros (`zeros_from`) is not sent: the server makes it a hole.
        let size = max(0, min(session.size, session.params?.zerosFrom ?? session.size))
        let retry = options.retry
        var offset: Int64
        if let knownOffset { offset = knownOffset } else { offset = try await renewing(&session) { try await uploadedBytes($0) } }
        var failures = 0
        while offset < size {
            try Task.checkCancellation()
            let end = offset == 0 && size <= options.chunkSize ? size : min(size, offset + options.chunkSize)
            do {
                let before = offset
                offset = try await renewing(&session) { try await send($0, from: source, offset: offset, end: end, progress: progress) }
                if offset > before {
                    failures = 0
                } else {
                    // Nothing arrived (a source shorter than declared, say): tried again a few times, never forever.
                    failures += 1
                    guard failures < retry.attempts else {
                        throw StorageError(.localIO, "no byte past \(before) of \(size) arrived in \(failures) tries; is the source shorter than declared?")
                    }
                    try await retry.sleep(retry.delay(after: failures))
                }
            } catch let error as StorageError where error.isTransient || error.kind == .offsetMismatch || error.kind == .conflict {
                failures += 1
                guard failures < retry.attempts else { throw error }
                try await retry.sleep(retry.delay(after: failures))
                offset = try await renewing(&session) { try await uploadedBytes($0) }
            }
        }
        if size == 0 { progress?(0, 0) }
        await willComplete?()
        try Task.checkCancellation()
        var attempt = 1
        while true {
            do {
                return try await completeUpload(session)
            } catch let error as StorageError where (error.isTransient || error.kind == .conflict) && attempt < retry.attempts {
                try await retry.sleep(retry.delay(after: attempt))
                attempt += 1
            }
        }
    }

    /// Runs `operation` on the storage link; when the server refuses the link (it expired while
    /// nothing was sent: a laptop asleep, a server that was away), renews it once and tries again.
    /// A session the server no longer has fails the renewal with `.notFound`: start again.
    public func renewing<T>(_ session: inout StartUploadResponse, _ operation: (StartUploadResponse) async throws -> T) async throws -> T {
        do {
            return try await operation(session)
        } catch let error as StorageError where error.kind == .forbidden {
            session = try await renewUpload(session)
            return try await operation(session)
        }
    }
}
