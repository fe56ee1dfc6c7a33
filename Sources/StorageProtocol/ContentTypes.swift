/// Content types inferred from a file's extension when an upload gives none.
public enum ContentTypes {
    public static let fallback = "application/octet-stream"

    private static let byExtension: [String: String] = [
        "txt": "text/plain", "text": "text/plain", "log": "text/plain", "md": "text/markdown", "csv": "text/csv",
        "tsv": "text/tab-separated-values", "html": "text/html", "htm": "text/html", "css": "text/css",
        "js": "text/javascript", "mjs": "text/javascript", "json": "application/json", "xml": "application/xml",
        "yaml": "application/yaml", "yml": "application/yaml", "toml": "application/toml", "pdf": "application/pdf",
        "zip": "application/zip", "gz": "application/gzip", "tgz": "application/gzip", "tar": "application/x-tar",
        "bz2": "application/x-bzip2", "xz": "application/x-xz", "zst": "application/zstd", "7z": "application/x-7z-compressed",
        "wasm": "application/wasm", "jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "gif": "image/gif",
        "webp": "image/webp", "svg": "image/svg+xml", "ico": "image/vnd.microsoft.icon", "bmp": "image/bmp",
        "tif": "image/tiff", "tiff": "image/tiff", "avif": "image/avif", "heic": "image/heic", "mp3": "audio/mpeg",
        "wav": "audio/wav", "ogg": "audio/ogg", "flac": "audio/flac", "m4a": "audio/mp4", "mp4": "video/mp4",
        "m4v": "video/mp4", "mov": "video/quicktime", "webm": "video/webm", "mkv": "video/x-matroska",
        "avi": "video/x-msvideo", "woff": "font/woff", "woff2": "font/woff2", "ttf": "font/ttf", "otf": "font/otf",
        "c": "text/x-c", "h": "text/x-c", "swift": "text/x-swift", "py": "text/x-python", "sh": "application/x-sh",
        "doc": "application/msword", "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "xls": "application/vnd.ms-excel", "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
        "ppt": "application/vnd.ms-powerpoint", "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
        "epub": "application/epub+zip", "iso": "application/x-iso9660-image",
    ]

    /// The content type for a file name, by its extension; `application/octet-stream` as the last resort.
    public static func infer(fileName: String) -> String {
        guard let dot = fileName.lastIndex(of: "."), dot != fileName.startIndex else { return fallback }
        let ext = fileName[fileName.index(after: dot)...].lowercased()
        return byExtension[ext] ?? fallback
    }

    /// Whether a client-given content type is acceptable (`type/subtype`, printable ASCII, no line breaks).
    public static func isValid(_ value: String) -> Bool {
        guard value.utf8.count <= 255, let slash = value.firstIndex(of: "/"), slash != value.startIndex,
            value.index(after: slash) != value.endIndex
        else { return false }
        return value.utf8.allSatisfy { $0 >= 0x20 && $0 < 0x7f }
    }
}
