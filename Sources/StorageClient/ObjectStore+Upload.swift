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
        if session.upload.direct != nil, session.deferLength != true, session.params?.zerosFrom == nil, session.size > 0,
            try await goesDirect(&session, knownOffset: knownOffset)
        {
            return try await sendDirect(session, from: source, options: options, progress: progress, willComplete: willComplete)
        }
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

    /// Whether an upload offered a direct way takes it: a new one does; one resumed does unless
    /// bytes went through its storage link before (the store then says it is being sent there).
    func goesDirect(_ session: inout StartUploadResponse, knownOffset: Int64?) async throws -> Bool {
        if knownOffset == 0 { return true }
        do {
            _ = try await renewing(&session) { try await uploadParts($0, numbers: []) }
            return true
        } catch let error as StorageError where error.kind == .conflict {
            return false
        }
    }

    /// A direct upload (`upload.direct`): the bytes go straight to the object store — the whole
    /// file in one PUT when it fits in a part, else in parts, `parallelParts` at a time, each sent
    /// again on a failure, only those the store lacks after a restart — then complete.
    func sendDirect(
        _ started: StartUploadResponse, from source: UploadSource, options: UploadOptions, progress: ProgressHandler?,
        willComplete: (@Sendable () async -> Void)?
    ) async throws -> FileRecord {
        var session = started
        let size = session.size
        let retry = options.retry
        guard let direct = session.upload.direct else { throw StorageError(.protocolViolation, "not a direct upload") }
        if size <= direct.partSize, direct.url != nil {
            var failures = 0
            while true {
                try Task.checkCancellation()
                do {
                    try await renewing(&session) { s in
                        guard let d = s.upload.direct, let url = d.url else { throw StorageError(.protocolViolation, "the renewed upload is not direct") }
                        try await putDirect(url: url, headers: d.headers ?? [:], from: source, offset: 0, end: size, progress: progress)
                    }
                    break
                } catch let error as StorageError where error.isTransient || error.kind == .conflict {
                    failures += 1
                    guard failures < retry.attempts else { throw error }
                    try await retry.sleep(retry.delay(after: failures))
                }
            }
        } else {
            try await sendParts(&session, from: source, options: options, progress: progress)
        }
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

    /// How many parts of a direct upload go at once.
    static var parallelParts: Int { 4 }

    /// The parts the store lacks, sent `parallelParts` at a time (URLs asked for 64 at a time).
    /// After a failure, the store is asked again which parts it has, and the others go.
    func sendParts(_ session: inout StartUploadResponse, from source: UploadSource, options: UploadOptions, progress: ProgressHandler?) async throws {
        let retry = options.retry
        var failures = 0
        while true {
            try Task.checkCancellation()
            do {
                try await sendMissingParts(&session, from: source, progress: progress)
                return
            } catch let error as StorageError where error.isTransient || error.kind == .forbidden || error.kind == .conflict {
                failures += 1
                guard failures < retry.attempts else { throw error }
                try await retry.sleep(retry.delay(after: failures))
                if error.kind == .forbidden { session = try await renewUpload(session) }
            }
        }
    }

    private func sendMissingParts(_ session: inout StartUploadResponse, from source: UploadSource, progress: ProgressHandler?) async throws {
        let size = session.size
        let first = try await renewing(&session) { try await uploadParts($0, numbers: []) }
        // 1 byte to `DirectUpload.largestPart`, parts numbered from 1 to `mostParts` (checked as
        // the answer is read): none of the sums below can overflow (a part size of 0 divided by
        // zero, one past the file's size overflowed `size + partSize - 1`).
        let partSize = first.partSize
        /// The bytes of part `number`, as the file divides.
        func expectedSize(_ number: Int) -> Int64 { min(partSize, size - Int64(number - 1) * partSize) }
        let count = Int((size + partSize - 1) / partSize)
        let stored = Set(first.stored.filter { $0.number <= count && $0.size == expectedSize($0.number) }.map(\.number))
        let missing = (1...count).filter { !stored.contains($0) }
        let counter = progress.map { ProgressCounter(base: min(size, Int64(stored.count) * partSize), total: size, report: $0) }
        for batchStart in stride(from: 0, to: missing.count, by: 64) {
            try Task.checkCancellation()
            let batch = Array(missing[batchStart..<min(batchStart + 64, missing.count)])
            let urls = try await renewing(&session) { try await uploadParts($0, numbers: batch) }.parts
            // A part is sent from where its number says, as long as the server gives it as this
            // upload divides: another number or size would put bytes where they do not belong.
            for part in urls where !batch.contains(part.number) || part.size != expectedSize(part.number) {
                throw StorageError(.protocolViolation, "the server gave part \(part.number) as \(part.size) bytes, not one of parts \(batch) of \(partSize) bytes of \(size)")
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                var next = 0
                func add(_ part: UploadPartsResponse.Part) {
                    group.addTask {
                        guard let url = part.url else { throw StorageError(.protocolViolation, "part \(part.number) came without a URL") }
                        let start = Int64(part.number - 1) * partSize
                        try await putDirect(url: url, headers: [:], from: source, offset: start, end: start + part.size, progress: nil)
                        counter?.add(part.size)
                    }
                }
                while next < urls.count && next < Self.parallelParts {
                    add(urls[next])
                    next += 1
                }
                while try await group.next() != nil {
                    if next < urls.count {
                        add(urls[next])
                        next += 1
                    }
                }
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
