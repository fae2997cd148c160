// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Spool",
    // The floor is the system SQLite: the schema's STRICT tables need 3.37.0,
    // first shipped in these releases (see README, "Platforms").
    platforms: [.iOS("15.4"), .macOS("12.4"), .tvOS("15.4"), .watchOS("8.5"), .visionOS(.v1)],
    products: [
        .library(name: "Spool", targets: ["Spool"]),
        .executable(name: "spool-bench", targets: ["spool-bench"]),
    ],
    targets: [
        // SQLite from the system (libsqlite3-dev on Debian/Ubuntu, the SDK on Apple platforms).
        .systemLibrary(
            name: "CSQLite",
            path: "Sources/CSQLite",
            providers: [.apt(["libsqlite3-dev"])]
        ),
        // zlib from the system (zlib1g-dev on Debian/Ubuntu, the SDK on Apple
        // platforms): gzip request bodies.
        .systemLibrary(
            name: "CZlib",
            path: "Sources/CZlib",
            providers: [.apt(["zlib1g-dev"])]
        ),
        // libcrypto from the system (libssl-dev on Debian/Ubuntu): AES-GCM for
        // sealed values where CryptoKit is missing. Apple platforms use CryptoKit.
        .systemLibrary(
            name: "CCrypto",
            path: "Sources/CCrypto",
            providers: [.apt(["libssl-dev"])]
        ),
        // The storage layer: connection, migrations, the event log and its
        // consumers. It knows nothing of listeners, surveys, HTTP or the engine.
        .target(
            name: "SpoolStorage",
            dependencies: ["CSQLite"],
            path: "Sources/SpoolStorage"
        ),
        .target(
            name: "Spool",
            dependencies: [
                "SpoolStorage", "CZlib", .target(name: "CCrypto", condition: .when(platforms: [.linux, .android])),
            ],
            path: "Sources/Spool",
            resources: [.copy("PrivacyInfo.xcprivacy")]
        ),
        .executableTarget(
            name: "spool-bench",
            dependencies: ["Spool", "SpoolStorage", "CSQLite"],
            path: "Benchmarks"
        ),
        // A child process the crash tests SIGKILL at random moments.
        .executableTarget(
            name: "spool-crash-child",
            dependencies: ["Spool", "SpoolStorage"],
            path: "Tests/CrashChild"
        ),
        .testTarget(
            name: "SpoolTests",
            dependencies: ["Spool", "SpoolStorage", "CSQLite", "CZlib", "spool-crash-child"],
            path: "Tests/SpoolTests"
        ),
    ],
    swiftLanguageModes: [.v6]
)
