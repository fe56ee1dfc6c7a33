import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Runs a program and collects its output, with posix_spawn rather than Foundation's `Process`.
///
/// Swift 6.3.1's `Process.run()` on Linux reads past a buffer while it counts the open
/// descriptors (`findMaximumOpenFromProcSelfFD`, swift-corelibs-foundation PR #5472) and crashes
/// the process now and then: a full test run, which spawns thousands of commands beside its
/// servers, died of it (SIGSEGV in memmove under `Process.run`). Here the output pipe is made
/// close-on-exec, so a child gets only its own stdin, stdout and stderr (and what other code left
/// without close-on-exec: NIO, SQLite and Foundation's files have it).
enum Spawn {
    struct Failure: Error, CustomStringConvertible { var description: String }

    /// Runs `tool` with `args` (in `cwd`, with `environment`); returns its exit status (128 + the
    /// signal if one ended it) and its stdout and stderr together.
    static func run(_ tool: String, _ args: [String], cwd: String?, environment: [String: String]) throws -> (status: Int32, out: String) {
        var fds: [Int32] = [-1, -1]
        guard pipe(&fds) == 0 else { throw Failure(description: "pipe: errno \(errno)") }
        let (readEnd, writeEnd) = (fds[0], fds[1])
        // Close-on-exec (Glibc's module has no pipe2): another spawn at this very moment could
        // still inherit them, which only delays our end of file until its child exits.
        _ = fcntl(readEnd, F_SETFD, FD_CLOEXEC)
        _ = fcntl(writeEnd, F_SETFD, FD_CLOEXEC)
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, 1)
        posix_spawn_file_actions_adddup2(&actions, writeEnd, 2)
        // A working folder through the shell (Glibc's module has no posix_spawn_file_actions_addchdir_np).
        let command = cwd.map { ["/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", $0, tool] + args } ?? [tool] + args
        let argv = command.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for p in argv { free(p) }
            for p in envp { free(p) }
        }
        // Signals as a new program expects them: default actions and none blocked. The test
        // process ignores some (servers in it take SIGINT and SIGTERM themselves), and a child
        // would inherit that: `timeout -s INT 1 flock …` could then never interrupt its flock.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var all = sigset_t(), none = sigset_t()
        sigfillset(&all)
        sigemptyset(&none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        var pid: pid_t = 0
        let started = ContinuousClock.now
        defer {
            // A command that holds a test thread this long starves the other tests' timers: say so.
            let took = ContinuousClock.now - started
            if took > .seconds(20) { FileHandle.standardError.write(Data("[spawn] \(took) for \(([tool] + args).joined(separator: " ").prefix(300))\n".utf8)) }
        }
        let rc = posix_spawn(&pid, command[0], &actions, &attributes, argv, envp)
        close(writeEnd)
        guard rc == 0 else {
            close(readEnd)
            throw Failure(description: "cannot run \(tool): errno \(rc)")
        }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(readEnd, $0.baseAddress, $0.count) }
            if n > 0 {
                data.append(contentsOf: buffer[0..<n])
            } else if n < 0 && errno == EINTR {
                continue
            } else {
                break
            }
        }
        close(readEnd)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        // WIFEXITED / WEXITSTATUS / WTERMSIG, spelled out (they are macros).
        let code = (status & 0x7f) == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
        return (code, String(decoding: data, as: UTF8.self))
    }
}
