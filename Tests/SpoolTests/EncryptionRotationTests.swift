import Foundation
import Testing

@testable import Spool
@testable import SpoolStorage

/// A key rotated in one process while another uses the file (P12).
@Suite(.needsChildProcesses)
struct EncryptionRotationTests {
    @Test(
        "P12: after one engine's reencryptAll, another engine on the file seals with the new key from its next commit, so nothing is lost when the old key goes"
    )
    func rotationReachesAnotherEngine() async throws {
        let directory = TemporaryDirectory()
        let collector = try await TestCollector(directory)
        let keys = try TestKeys("k1")  // one provider for both, as a shared keychain item
        var configuration = uploadingConfiguration(directory, collector: collector, batchSize: 500)
        configuration.encryption = .aesGCM(keyProvider: keys)
        let app = EventEngine(configuration: configuration)
        try await app.start()
        var extensionConfiguration = EngineConfiguration(database: .file(directory.defaultDataStoreURL))
        extensionConfiguration.encryption = .aesGCM(keyProvider: keys)
        let appExtension = EventEngine(configuration: extensionConfiguration)
        try await appExtension.start()
        var ids = try recordEvents(appExtension, 3, prefix: "before")
        try await appExtension.settle()

        try keys.makeCurrent("k2")
        _ = try await app.reencryptAll()
        ids += try recordEvents(appExtension, 5, prefix: "after")
        try await appExtension.settle()
        #expect(Set(try await EncryptionTests.keyIDs(app, "events")) == ["k2"], "the extension seals with k2 too")
        keys.forget("k1")
        await appExtension.close()
        await app.close()

        let relaunched = EventEngine(configuration: configuration)
        try await relaunched.start()
        try await relaunched.flush()
        #expect(Set(collector.acceptedIDs()).isSuperset(of: ids))
        #expect(try await relaunched.query { try $0.deadLetterCount() } == 0, "none undecryptable")
        await relaunched.close()
    }

    @Test(
        "P12: a process whose key provider does not give the key another process made current reports it, once a minute at most, and seals with its own key meanwhile"
    )
    func aProviderThatDoesNotFollowIsReported() async throws {
        let directory = TemporaryDirectory()
        let appKeys = try TestKeys("k1")
        var configuration = EngineConfiguration(database: .file(directory.databaseURL))
        configuration.encryption = .aesGCM(keyProvider: appKeys)
        let app = EventEngine(configuration: configuration)
        try await app.start()
        // The extension's own provider: a copy of k1 that never learns k2.
        let heard = Protected<[SpoolDiagnostic]>([])
        configuration.encryption = .aesGCM(keyProvider: try TestKeys("k1"))
        configuration.diagnosticHandler = { diagnostic in
            if diagnostic.kind == .encryptionKeyNotFollowed { heard.withLock { $0.append(diagnostic) } }
        }
        let appExtension = EventEngine(configuration: configuration)
        try await appExtension.start()

        try appKeys.makeCurrent("k2")
        _ = try await app.reencryptAll()
        for round in 0..<5 {
            _ = try recordEvents(appExtension, 3, prefix: "round\(round)-")
            try await appExtension.settle()
        }
        #expect(try await waitUntil { heard.withLock { $0.count } >= 1 })
        let reports = heard.withLock { $0 }
        #expect(reports.count == 1, "asked once for five commits within a minute: \(reports.map(\.message))")
        #expect(reports.first?.message.contains("k2") == true && reports.first?.message.contains("k1") == true)
        let sealedWith = try await EncryptionTests.keyIDs(app, "events")
        #expect(
            sealedWith.filter { $0 == "k1" }.count >= 15, "the extension's events still open with k1: \(sealedWith)")
        await appExtension.close()
        await app.close()
    }
}
