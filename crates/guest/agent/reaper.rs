//! Collects every child's exit status, as PID 1 must (orphans are re-parented to it), and
//! hands each to whoever waits for that pid.
//!
//! One thread takes SIGCHLD (blocked everywhere else) and reaps with `waitpid(-1, WNOHANG)`.
//! Spawning holds the same lock: the standard library reaps a child whose `exec` failed by
//! itself, and must not find it reaped already.

use crate::protocol::Status;
use crate::sys;
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Mutex, MutexGuard, OnceLock};

struct State {
    waiting: HashMap<i32, Sender<Status>>,
    /// Statuses of children nobody waited for yet (they ended before `watch`).
    unclaimed: HashMap<i32, Status>,
}

fn state() -> &'static Mutex<State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE.get_or_init(|| {
        Mutex::new(State {
            waiting: HashMap::new(),
            unclaimed: HashMap::new(),
        })
    })
}

fn spawn_lock() -> &'static Mutex<()> {
    static LOCK: Mutex<()> = Mutex::new(());
    &LOCK
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Held while spawning a child.
pub fn spawning() -> MutexGuard<'static, ()> {
    lock(spawn_lock())
}

/// Starts the reaper thread; call once, from the main thread, before any other thread.
pub fn start() {
    sys::block_sigchld();
    std::thread::spawn(|| {
        loop {
            sys::wait_sigchld();
            let _spawning = spawning();
            while let Ok(Some((pid, raw))) = sys::reap_any() {
                let status = sys::decode_status(raw);
                let mut s = lock(state());
                match s.waiting.remove(&pid) {
                    Some(tx) => {
                        let _ = tx.send(status);
                    }
                    None => {
                        // Orphans re-parented to PID 1 are never claimed: keep only few.
                        if s.unclaimed.len() > 4096 {
                            s.unclaimed.clear();
                        }
                        s.unclaimed.insert(pid, status);
                    }
                }
            }
        }
    });
}

/// The exit status of child `pid`, once it ends.
pub fn watch(pid: i32) -> Receiver<Status> {
    let (tx, rx) = channel();
    let mut s = lock(state());
    match s.unclaimed.remove(&pid) {
        Some(status) => {
            let _ = tx.send(status);
        }
        None => {
            s.waiting.insert(pid, tx);
        }
    }
    rx
}

/// Forgets child `pid` (its status will be dropped).
pub fn forget(pid: i32) {
    let mut s = lock(state());
    s.waiting.remove(&pid);
    s.unclaimed.remove(&pid);
}
