import Foundation
public import Logging
import StorageClient
#if canImport(Glibc)
import Glibc
#endif

/// The `stowd` a mount without `--endpoint` uses: the one already serving the data folder, or a
/// new one started beside `stowfs` on loopback.
public final class EmbeddedServer {
    public let endpoint: String
    public let token: String
    private let child: StowdChild?

    public static func defaultDataDirectory() -> String {
        let env = ProcessInfo.processInfo.environment
        let base = env["XDG_DATA_HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? (userHomeDirectory(env) + "/.local/share")
        return base + "/stowfs/stowd"
    }

    private init(endpoint: String, token: String, child: StowdChild?) {
        self.endpoint = endpoint
        self.token = token
        self.child = child
    }

    /// Finds the running stowd of `dataDirectory`, or starts one.
    public static func findOrStart(dataDirectory: String, logger: Logger) async throws -> EmbeddedServer {
        if let url = try? String(contentsOfFile: dataDirectory + "/stowd.url", encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines),
            await isHealthy(url), let token = readToken(dataDirectory)
        {
            logger.info("using the stowd already serving \(dataDirectory) at \(url)")
            return EmbeddedServer(endpoint: url, token: token, child: nil)
        }
        let binary = StowdChild.siblingBinary()
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw MountProblem("no stowd beside stowfs (\(binary))", fix: "install both (make install), or give a server with --endpoint URL")
        }
        var env = ProcessInfo.processInfo.environment
        env["STOWD_TOKEN"] = nil
        let fix = "run it by hand to see why: \(binary) --data-dir \(dataDirectory)"
        let child: StowdChild
        do {
            child = try StowdChild(binary: binary, arguments: ["--data-dir", dataDirectory, "--port", "0", "--log-level", "warning"], environment: env)
        } catch {
            throw MountProblem("the embedded stowd did not start (data in \(dataDirectory)): \(error)", fix: fix)
        }
        guard let token = readToken(dataDirectory) else {
            child.stop()
            throw MountProblem("the embedded stowd wrote no admin token in \(dataDirectory)", fix: fix)
        }
        logger.info("started stowd at \(child.url) (data in \(dataDirectory))")
        return EmbeddedServer(endpoint: child.url, token: token, child: child)
    }

    static func readToken(_ dir: String) -> String? {
        (try? String(contentsOfFile: dir + "/admin.token", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func isHealthy(_ url: String) async -> Bool {
        let store = HTTPObjectStore(configuration: {
            var c = HTTPObjectStore.Configuration(endpoint: url, token: nil)
            c.retry = .none
            c.requestTimeout = .seconds(2)
            return c
        }())
        defer { Task { try? await store.shutdown() } }
        do {
            _ = try await store.namespaces()
            return true
        } catch let e as StorageError {
            return e.kind == .unauthorized
        } catch {
            return false
        }
    }

    /// Stops the stowd this started (a stowd found running is left alone).
    public func stop() { child?.stop() }
}
