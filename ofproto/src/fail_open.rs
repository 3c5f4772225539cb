//! When a standalone bridge fails open, timed as OVS times it.
//!
//! A bridge in fail mode `standalone` with controllers configured forwards
//! by NORMAL (fail-open) once it has been without any controller long
//! enough for every controller to have had its chance: three times the
//! largest inactivity probe interval (one interval idle before the probe,
//! one for its answer, one to reconnect), counted from the moment the last
//! controller went away, or from the first controller's configuration if
//! none ever connected. The default 5 s probe makes that 15 s; a probe of
//! 0 (probes off) fails open at once. It ends the moment any controller
//! connects. This is OVS's `fail-open.c` rule; before it xbr failed open
//! as soon as the last controller went, so a controller's brief restart
//! flipped every bridge to NORMAL.
//!
//! State is one mutex-guarded struct, changed by the server's threads
//! (fail mode set, controller added, connected, disconnected) and read by
//! one timer thread, which sleeps on a condition variable until the
//! deadline or a change: no polling, and the datapath hears of each
//! change once, through [`Datapath::set_fail_open`].
//!
//! [`Datapath::set_fail_open`]: crate::Datapath::set_fail_open

use crate::bridge::Bridge;
use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct State {
    standalone: bool,
    /// The inactivity probe intervals of the controllers configured,
    /// connected or not (one each), and the largest of them.
    probes: Vec<Duration>,
    max_probe: Duration,
    /// Controller connections up now.
    up: usize,
    /// Since when no controller has been connected (while `up == 0`).
    alone_since: Instant,
    /// What the datapath was last told.
    open: bool,
    stop: bool,
}

impl State {
    /// Forgets one controller configured with `probe`.
    fn remove_probe(&mut self, probe: Duration) {
        if let Some(i) = self.probes.iter().position(|p| *p == probe) {
            self.probes.swap_remove(i);
        }
        self.max_probe = self.probes.iter().copied().max().unwrap_or(Duration::ZERO);
    }

    /// When fail-open begins, if it is due at all in this state.
    fn opens_at(&self) -> Option<Instant> {
        (self.standalone && !self.probes.is_empty() && self.up == 0)
            .then(|| self.alone_since + self.max_probe * 3)
    }
}

/// The fail-open state of one OpenFlow server and its timer thread.
pub(crate) struct FailOpen {
    state: Mutex<State>,
    changed: Condvar,
    bridge: Arc<Bridge>,
}

impl FailOpen {
    pub(crate) fn new(bridge: Arc<Bridge>) -> Arc<FailOpen> {
        Arc::new(FailOpen {
            state: Mutex::new(State {
                standalone: false,
                probes: Vec::new(),
                max_probe: Duration::ZERO,
                up: 0,
                alone_since: Instant::now(),
                open: false,
                stop: false,
            }),
            changed: Condvar::new(),
            bridge,
        })
    }

    /// Starts the timer thread, which ends at [`FailOpen::stop`].
    pub(crate) fn spawn(self: &Arc<Self>) -> std::io::Result<JoinHandle<()>> {
        let me = self.clone();
        std::thread::Builder::new()
            .name("of-fail-open".into())
            .spawn(move || me.run())
    }

    pub(crate) fn set_standalone(&self, standalone: bool) {
        self.change(|s| s.standalone = standalone);
    }

    /// A controller was configured, with inactivity probe `probe`.
    pub(crate) fn controller_added(&self, probe: Duration) {
        self.change(|s| {
            if s.probes.is_empty() && s.up == 0 {
                s.alone_since = Instant::now();
            }
            s.probes.push(probe);
            s.max_probe = s.max_probe.max(probe);
        });
    }

    /// A controller configured with inactivity probe `probe` was removed
    /// (its connection, if up, goes down on its own): the others time
    /// fail-open, and without any it is over.
    pub(crate) fn controller_removed(&self, probe: Duration) {
        self.change(|s| s.remove_probe(probe));
    }

    /// A configured controller's inactivity probe changed from `old` to
    /// `new`: fail-open is timed with the new one.
    pub(crate) fn controller_probe_changed(&self, old: Duration, new: Duration) {
        self.change(|s| {
            s.remove_probe(old);
            s.probes.push(new);
            s.max_probe = s.max_probe.max(new);
        });
    }

    pub(crate) fn controller_up(&self) {
        self.change(|s| s.up += 1);
    }

    pub(crate) fn controller_down(&self) {
        self.change(|s| {
            s.up = s.up.saturating_sub(1);
            if s.up == 0 {
                s.alone_since = Instant::now();
            }
        });
    }

    /// Ends the timer; fail-open, if on, ends with the server (the next
    /// server of the bridge, after a reconfiguration, starts closed and
    /// times its own).
    pub(crate) fn stop(&self) {
        self.change(|s| {
            s.stop = true;
            s.probes.clear();
        });
    }

    /// Applies `f`, settles what is due now, and wakes the timer for what
    /// is due later.
    fn change(&self, f: impl FnOnce(&mut State)) {
        let mut s = self.state.lock();
        f(&mut s);
        self.settle(&mut s, Instant::now());
        self.changed.notify_all();
    }

    /// Tells the datapath if fail-open should now be on and is not, or
    /// the reverse.
    fn settle(&self, s: &mut State, now: Instant) {
        let open = s.opens_at().is_some_and(|at| at <= now);
        if open != s.open {
            s.open = open;
            if open {
                tracing::warn!(
                    after = ?s.max_probe * 3,
                    "no controller connected: entering fail-open mode (NORMAL forwarding)"
                );
            } else {
                tracing::info!("leaving fail-open mode");
            }
            self.bridge.datapath().set_fail_open(open);
        }
    }

    fn run(&self) {
        let mut s = self.state.lock();
        while !s.stop {
            let now = Instant::now();
            self.settle(&mut s, now);
            match s.opens_at().filter(|&at| at > now) {
                Some(at) => {
                    self.changed.wait_until(&mut s, at);
                }
                None => self.changed.wait(&mut s),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State {
            standalone: true,
            probes: vec![Duration::from_secs(5)],
            max_probe: Duration::from_secs(5),
            up: 0,
            alone_since: Instant::now(),
            open: false,
            stop: false,
        }
    }

    #[test]
    fn opens_three_probe_intervals_after_the_last_controller() {
        let s = state();
        assert_eq!(s.opens_at(), Some(s.alone_since + Duration::from_secs(15)));
    }

    #[test]
    fn never_while_connected_secure_or_without_controllers() {
        let mut s = state();
        s.up = 1;
        assert_eq!(s.opens_at(), None);
        let mut s = state();
        s.standalone = false;
        assert_eq!(s.opens_at(), None);
        let mut s = state();
        s.probes.clear();
        assert_eq!(s.opens_at(), None);
    }

    #[test]
    fn a_removed_controller_no_longer_times_it() {
        let mut s = state();
        s.probes.push(Duration::from_secs(30));
        s.max_probe = Duration::from_secs(30);
        s.remove_probe(Duration::from_secs(30));
        assert_eq!(s.opens_at(), Some(s.alone_since + Duration::from_secs(15)));
        s.remove_probe(Duration::from_secs(5));
        assert_eq!(s.opens_at(), None);
    }

    #[test]
    fn probes_off_open_at_once() {
        let mut s = state();
        s.max_probe = Duration::ZERO;
        assert_eq!(s.opens_at(), Some(s.alone_since));
    }
}
