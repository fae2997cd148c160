import Foundation
import Testing

/// The privacy manifest Xcode merges into an app's privacy report
/// (Sources/Spool/PrivacyInfo.xcprivacy): well formed, shipped with the
/// library, and honest about the required-reason APIs Sources/ calls.
struct PrivacyManifestTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let manifestURL = root.appendingPathComponent("Sources/Spool/PrivacyInfo.xcprivacy")

    /// Apple's required-reason API categories, each with spellings of the
    /// APIs it covers (Apple's list, "Describing use of required reason API").
    static let requiredReasonAPIs: [(category: String, patterns: [String])] = [
        (
            "NSPrivacyAccessedAPICategoryFileTimestamp",
            [
                #"\b(creationDate|modificationDate|fileCreationDate|fileModificationDate|contentModificationDate)\b"#,
                #"\b(creationDateKey|contentModificationDateKey)\b"#,
                #"\bNSFile(Creation|Modification)Date\b"#, #"\bNSURL(Creation|ContentModification)DateKey\b"#,
                #"\battributesOfItem\b"#, #"\b(f|l)?stat(at)?\s*\("#, #"\bf?getattrlist(bulk|at)?\s*\("#,
            ]
        ),
        (
            "NSPrivacyAccessedAPICategorySystemBootTime",
            [
                #"\bsystemUptime\b"#, #"\bmach_(absolute|continuous)_time\b"#, #"\buptimeNanoseconds\b"#,
                // The monotonic clocks that count from boot, read directly.
                #"\bCLOCK_(MONOTONIC|BOOTTIME|UPTIME)\w*\b"#, #"\bclock_gettime_nsec_np\b"#,
            ]
        ),
        (
            "NSPrivacyAccessedAPICategoryDiskSpace",
            [
                #"\bvolume(AvailableCapacity\w*|TotalCapacity)(Key)?\b"#, #"\bNSFileSystem(Free)?Size\b"#,
                #"\bsystem(Free)?Size\b"#, #"\bf?statv?fs\s*\("#,
            ]
        ),
        ("NSPrivacyAccessedAPICategoryUserDefaults", [#"\b(NS)?UserDefaults\b"#]),
        ("NSPrivacyAccessedAPICategoryActiveKeyboards", [#"\bactiveInputModes\b"#]),
    ]

    func manifest() throws -> [String: Any] {
        let data = try Data(contentsOf: Self.manifestURL)
        let plist = try PropertyListSerialization.propertyList(from: data, options: [], format: nil)
        return try #require(plist as? [String: Any], "the manifest is a dictionary")
    }

    @Test("the manifest: no tracking, no tracking domains, nothing collected by Spool itself")
    func declaresNoTrackingAndNoCollection() throws {
        let manifest = try manifest()
        #expect(
            Set(manifest.keys) == [
                "NSPrivacyTracking", "NSPrivacyTrackingDomains", "NSPrivacyCollectedDataTypes",
                "NSPrivacyAccessedAPITypes",
            ])
        #expect(manifest["NSPrivacyTracking"] as? Bool == false)
        let domains = try #require(manifest["NSPrivacyTrackingDomains"] as? [Any])
        #expect(domains.isEmpty)
        let collected = try #require(manifest["NSPrivacyCollectedDataTypes"] as? [Any])
        #expect(collected.isEmpty, "the host app declares what its events contain")
        let accessed = try #require(manifest["NSPrivacyAccessedAPITypes"] as? [[String: Any]])
        let categories = Set(Self.requiredReasonAPIs.map(\.category))
        for entry in accessed {
            let category = try #require(entry["NSPrivacyAccessedAPIType"] as? String)
            #expect(categories.contains(category), "\(category) is a required-reason category")
            let reasons = try #require(entry["NSPrivacyAccessedAPITypeReasons"] as? [String])
            #expect(!reasons.isEmpty, "\(category) gives a reason")
            for reason in reasons {
                #expect(reason.range(of: #"^[0-9A-F]{4}\.[0-9]$"#, options: .regularExpression) != nil, "\(reason)")
            }
        }
    }

    @Test("the manifest ships as a resource of the Spool target")
    func isAResourceOfTheLibrary() throws {
        let package = try String(contentsOf: Self.root.appendingPathComponent("Package.swift"), encoding: .utf8)
        #expect(package.contains(#"resources: [.copy("PrivacyInfo.xcprivacy")]"#))
    }

    @Test("every required-reason API Sources/ calls is declared in the manifest")
    func requiredReasonAPIsAreDeclared() throws {
        let accessed = try #require(try manifest()["NSPrivacyAccessedAPITypes"] as? [[String: Any]])
        let declared = Set(accessed.compactMap { $0["NSPrivacyAccessedAPIType"] as? String })
        let sources = Self.root.appendingPathComponent("Sources")
        let files = try #require(FileManager.default.enumerator(at: sources, includingPropertiesForKeys: nil))
            .compactMap { $0 as? URL }
            .filter { ["swift", "h", "c", "m"].contains($0.pathExtension) }
        #expect(files.count > 20, "found the sources")
        var undeclared: [String] = []
        for file in files {
            let code = Self.withoutComments(try String(contentsOf: file, encoding: .utf8))
            let lines = code.split(separator: "\n", omittingEmptySubsequences: false)
            for (category, patterns) in Self.requiredReasonAPIs where !declared.contains(category) {
                for pattern in patterns where code.range(of: pattern, options: .regularExpression) != nil {
                    for (index, line) in lines.enumerated()
                    where line.range(of: pattern, options: .regularExpression) != nil {
                        let path = file.path.replacingOccurrences(of: Self.root.path + "/", with: "")
                        undeclared.append(
                            "\(path):\(index + 1): \(category): \(line.trimmingCharacters(in: .whitespaces))")
                    }
                }
            }
        }
        #expect(undeclared.isEmpty, "declare these in PrivacyInfo.xcprivacy:\n\(undeclared.joined(separator: "\n"))")
    }

    @Test("the scan reads code, not comments, and a // inside a string is no comment")
    func scanSkipsComments() {
        let source = #"""
            /// Not UserDefaults: a queue.
            let url = "http://example.com"; let d = UserDefaults.standard  // UserDefaults
            let raw = #"a "quoted" // text"#; /* UserDefaults /* nested */ systemUptime */ let t = 1
            """#
        let lines = Self.withoutComments(source).split(separator: "\n", omittingEmptySubsequences: false)
        #expect(lines.count == 3)
        #expect(!lines[0].contains("UserDefaults"))
        #expect(lines[1].components(separatedBy: "UserDefaults").count == 2, "\(lines[1])")
        #expect(lines[2].contains("let t = 1") && !lines[2].contains("systemUptime"), "\(lines[2])")
    }

    /// `source` with its comments blanked, newlines kept so line numbers
    /// hold. String literals (raw and multi-line ones too) are kept as they
    /// are, so a `//` inside one starts no comment.
    static func withoutComments(_ source: String) -> String {
        let scalars = Array(source.unicodeScalars)
        var out = String.UnicodeScalarView()
        var i = 0
        func starts(_ text: String, at index: Int) -> Bool {
            let pattern = Array(text.unicodeScalars)
            return index + pattern.count <= scalars.count && Array(scalars[index..<index + pattern.count]) == pattern
        }
        func blank(_ count: Int) {
            for _ in 0..<count where i < scalars.count {
                out.append(scalars[i] == "\n" ? "\n" : " ")
                i += 1
            }
        }
        func copy(_ count: Int) {
            for _ in 0..<count where i < scalars.count {
                out.append(scalars[i])
                i += 1
            }
        }
        while i < scalars.count {
            if starts("//", at: i) {
                while i < scalars.count && scalars[i] != "\n" { blank(1) }
            } else if starts("/*", at: i) {
                var depth = 0
                repeat {
                    if starts("/*", at: i) {
                        depth += 1
                        blank(2)
                    } else if starts("*/", at: i) {
                        depth -= 1
                        blank(2)
                    } else {
                        blank(1)
                    }
                } while depth > 0 && i < scalars.count
            } else if scalars[i] == "\"" || scalars[i] == "#" {
                var hashes = 0
                while i + hashes < scalars.count && scalars[i + hashes] == "#" { hashes += 1 }
                guard i + hashes < scalars.count, scalars[i + hashes] == "\"" else {
                    copy(max(hashes, 1))
                    continue
                }
                let multiLine = starts("\"\"\"", at: i + hashes)
                let close = (multiLine ? "\"\"\"" : "\"") + String(repeating: "#", count: hashes)
                copy(hashes + (multiLine ? 3 : 1))
                while i < scalars.count && !starts(close, at: i) {
                    copy(hashes == 0 && scalars[i] == "\\" ? 2 : 1)
                }
                copy(close.unicodeScalars.count)
            } else {
                copy(1)
            }
        }
        return String(out)
    }
}
