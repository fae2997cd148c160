import Foundation
import Testing

@testable import Spool

/// One place says where the database is: a dispatcher's `backingStore` and
/// `dataStoreName` that ask for another location than `database` are a typed
/// error at `start()`, not silently ignored (D5).
struct ConfigurationConflictTests {
    static let collector = URL(string: "http://127.0.0.1:9/unused")!

    func configuration(_ database: DatabaseLocation, _ dispatcher: DefaultEventDispatcher) -> EngineConfiguration {
        EngineConfiguration(
            database: database, collectorURL: Self.collector, uploadInterval: 3_600, dispatcher: dispatcher)
    }

    @Test(
        "D5: a dispatcher's backingStore or dataStoreName that disagrees with database is a typed error, no file touched",
        arguments: [(DataStoreType.file, "Other", true), (.memory, "OPTEventQueue", true), (.file, "Other", false)])
    func disagreeingLocationIsATypedError(store: DataStoreType, name: String, onFile: Bool) async throws {
        let directory = TemporaryDirectory()
        let dispatcher = DefaultEventDispatcher(backingStore: store, dataStoreName: name)
        let engine = EventEngine(
            configuration: configuration(onFile ? .file(directory.databaseURL) : .inMemory, dispatcher))
        await #expect {
            try await engine.start()
        } throws: { error in
            guard case .conflictingDatabaseLocation(_, let requested) = error as? SpoolError else { return false }
            return requested == (store == .memory ? "memory" : "a file named \(name).sqlite")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path).isEmpty, "no file touched")
        await engine.close()
    }

    @Test("D5: a dispatcher asking for its defaults, or for what database says, starts")
    func agreeingLocationsStart() async throws {
        let directory = TemporaryDirectory()
        let agreeing = [
            configuration(.file(directory.databaseURL), DefaultEventDispatcher()),
            configuration(.inMemory, DefaultEventDispatcher()),
            configuration(.inMemory, DefaultEventDispatcher(backingStore: .memory)),
            configuration(
                .file(directory.file("Named.sqlite")),
                DefaultEventDispatcher(dataStoreName: "Named")),
            .uploading(
                to: Self.collector, dispatcher: DefaultEventDispatcher(dataStoreName: "Mine"),
                in: directory.url),
        ]
        for configuration in agreeing {
            let engine = EventEngine(configuration: configuration)
            try await engine.start()
            await engine.close()
        }
    }
}
