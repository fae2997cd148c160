import Foundation
import PackagePlugin

/// Embeds the package's top-level `Migrations/*.sql` files into the target as
/// generated Swift source.
///
/// The schema's only source of truth stays in `Migrations/`; the library carries
/// a copy in its binary, so a binary moved elsewhere can still create and
/// migrate its database without a resource bundle.
@main
struct EmbedMigrations: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        let directory = context.package.directoryURL.appending(path: "Migrations")
        let files = try FileManager.default
            .contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "sql" }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedMigrations.swift")
        return [
            .buildCommand(
                displayName: "Embedding \(files.count) migration(s) into \(target.name)",
                executable: try context.tool(named: "spool-embed-migrations").url,
                arguments: [output.path] + files.map(\.path),
                inputFiles: files,
                outputFiles: [output]
            )
        ]
    }
}
