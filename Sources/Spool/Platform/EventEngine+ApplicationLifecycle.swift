import Foundation

#if canImport(UIKit) && !os(watchOS)
    import UIKit
#endif

extension EventEngine {
    #if canImport(UIKit) && !os(watchOS)
        func observeApplicationLifecycle() {
            let center = NotificationCenter.default
            center.addObserver(forName: UIApplication.didEnterBackgroundNotification, object: nil, queue: nil) {
                [weak self] _ in self?.applicationDidEnterBackground()
            }
            center.addObserver(forName: UIApplication.didBecomeActiveNotification, object: nil, queue: nil) {
                [weak self] _ in self?.applicationDidBecomeActive()
            }
        }
    #endif
}
