//! A dedicated arbiter (a thread with its own event loop) that stops when its
//! last owner lets go. A gateway dropped without a stop signal (an embedding
//! host, a test) would otherwise leave the thread, and the database pool and
//! journal its actor holds, running until the process ends.

use std::sync::Arc;

use actix_rt::{Arbiter, ArbiterHandle};

#[derive(Debug, Clone)]
pub struct OwnedArbiter(Arc<Stopper>);

#[derive(Debug)]
struct Stopper(ArbiterHandle);

impl Drop for Stopper {
    fn drop(&mut self) {
        // Messages already queued are dropped with the actors: a ledger's rows
        // are in its journal by then, and a stop signal flushes them first.
        self.0.stop();
    }
}

impl OwnedArbiter {
    pub fn new() -> OwnedArbiter {
        OwnedArbiter(Arc::new(Stopper(Arbiter::new().handle())))
    }

    pub fn handle(&self) -> &ArbiterHandle {
        &self.0.0
    }
}

impl Default for OwnedArbiter {
    fn default() -> OwnedArbiter {
        OwnedArbiter::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_ends_with_its_last_owner() {
        let _system = actix_rt::System::new();
        let arbiter = OwnedArbiter::new();
        let copy = arbiter.clone();
        // Not an owner: it only asks whether the thread still runs.
        let watch = arbiter.handle().clone();
        drop(arbiter);
        let (tx, rx) = std::sync::mpsc::channel();
        assert!(watch.spawn_fn(move || tx.send(()).unwrap()));
        rx.recv().unwrap();
        drop(copy);
        for _ in 0..200 {
            if !watch.spawn_fn(|| {}) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("the arbiter's thread outlived its owners");
    }
}
