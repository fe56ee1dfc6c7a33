import Foundation

/// RFC 9110 HTTP-dates (`Sun, 06 Nov 1994 08:49:37 GMT`), for `Last-Modified` and `Upload-Expires`.
enum HTTPDate {
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    static func format(seconds: Int64) -> String {
        var t = time_t(seconds)
        var tm = tm()
        gmtime_r(&t, &tm)
        return String(
            format: "%@, %02d %@ %04d %02d:%02d:%02d GMT", days[Int(tm.tm_wday)], tm.tm_mday, months[Int(tm.tm_mon)], Int(tm.tm_year) + 1900,
            tm.tm_hour, tm.tm_min, tm.tm_sec)
    }
}
