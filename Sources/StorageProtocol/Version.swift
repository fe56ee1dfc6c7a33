/// The version of StowFS: `stowd --version`, `stowfs --version`, the Debian package and the man pages.
public enum StowVersion {
    public static let string = "0.9.0"
}
