// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Spool",
    // Custom actor executors (the uploader runs on the database queue) need these.
    platforms: [.macOS(.v14), .iOS(.v17), .watchOS(.v10), .tvOS(.v17)],
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
        // Turns Migrations/*.sql into generated Swift at build time, so the library
        // needs no resource bundle at run time.
        .executableTarget(
            name: "spool-embed-migrations",
            path: "Sources/EmbedMigrationsTool"
        ),
        .plugin(
            name: "EmbedMigrations",
            capability: .buildTool(),
            dependencies: ["spool-embed-migrations"],
            path: "Sources/EmbedMigrations"
        ),
        .target(
            name: "Spool",
            dependencies: ["CSQLite"],
            path: "Sources/Spool",
            plugins: ["EmbedMigrations"]
        ),
        .executableTarget(
            name: "spool-bench",
            dependencies: ["Spool", "CSQLite"],
            path: "Benchmarks"
        ),
        // A child process the crash tests SIGKILL at random moments.
        .executableTarget(
            name: "spool-crash-child",
            dependencies: ["Spool"],
            path: "Tests/CrashChild"
        ),
        .testTarget(
            name: "SpoolTests",
            dependencies: ["Spool", "CSQLite", "spool-crash-child"],
            path: "Tests/SpoolTests"
        ),
    ],
    swiftLanguageModes: [.v6]
)
