//! The states a world, a service and a slice can be in.
//!
//! One enum each, so a typo is a compile error rather than a world stuck in
//! a state nothing reads. The wire (serde, `snake_case`) and the registry's
//! `state` columns (text, through [`as_str`](WorldState::as_str) and
//! [`FromStr`](std::str::FromStr)) use the same words, so neither changed
//! when the strings became enums.

use serde::{Deserialize, Serialize};

/// Declares a state enum with its one spelling per variant, used by serde,
/// `Display`, `as_str` and `FromStr` alike.
macro_rules! states {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $($(#[$vdoc])* #[serde(rename = $text)] $variant,)+
        }

        impl $name {
            /// Every state, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The state's one spelling: on the wire, in the registry, in output.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownState;

            fn from_str(s: &str) -> Result<Self, UnknownState> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(UnknownState {
                        kind: stringify!($name),
                        text: s.to_owned(),
                    }),
                }
            }
        }
    };
}

states! {
    /// Where a world is in its lifecycle (`worlds.state`).
    WorldState {
        /// `up` (or `reload`) is making or starting it.
        Starting = "starting",
        /// Every service settled: processes answer, slices are provisioned.
        Running = "running",
        /// `down` or `remove` is stopping it.
        Stopping = "stopping",
        /// Paused by `down`: worktree, ports and slices kept.
        Stopped = "stopped",
        /// `up` failed or a service gave up; `error` says why.
        Failed = "failed",
        /// Waiting for admission: nothing made yet.
        Queued = "queued",
        /// Stopped by admission under memory pressure, to be resumed.
        Suspended = "suspended",
        /// Stopped after `idle_after` without a request or CPU use: ports,
        /// slices and files kept, its slot freed; the first request to one
        /// of its URLs (or `up`) wakes it.
        Sleeping = "sleeping",
        /// Gone: what `remove` answers with (never stored).
        Removed = "removed",
    }
}

states! {
    /// Where one service of a world is (`services.state`, and each proxy
    /// route's state).
    ServiceState {
        /// Started, its health probe not yet passed.
        Starting = "starting",
        /// Its own process answers its health probe (or a resource is ready).
        Running = "running",
        /// It was running and its probe now fails; it keeps its route.
        Unhealthy = "unhealthy",
        /// It exited and waits out its backoff before the next start.
        Restarting = "restarting",
        /// Not running, by request or after a clean exit.
        Stopped = "stopped",
        /// It gave up (restart policy exhausted, or failed to start).
        Failed = "failed",
        /// A resource whose slice exists and is ready.
        Provisioned = "provisioned",
        /// Its world was suspended by admission.
        Suspended = "suspended",
        /// Its world sleeps: the proxy wakes it on a request.
        Sleeping = "sleeping",
    }
}

states! {
    /// Where a slice is (`slices.state`): what `gc` may sweep.
    SliceState {
        /// Being made; a slice left here by a crash is swept by `gc`.
        Provisioning = "provisioning",
        /// Made and in use by its world.
        Live = "live",
        /// Teardown began and did not finish; `gc` retries it.
        Teardown = "teardown",
    }
}

states! {
    /// What kind of service a service is (`services.kind`).
    ServiceKind {
        /// A process Binky starts and supervises.
        Process = "process",
        /// A slice of a server the user runs.
        Resource = "resource",
    }
}

states! {
    /// The verb in flight on a world (`worlds.intent`), recorded before it
    /// acts: a daemon that restarts and finds one knows that verb was cut
    /// short.
    Intent {
        /// `up`: making or starting the world.
        Up = "up",
        /// `down`: stopping it.
        Down = "down",
        /// `reload`: restarting it with its config as on its branch now.
        Reload = "reload",
        /// `remove`: destroying it.
        Remove = "remove",
        /// Admission stopping it under memory pressure.
        Suspend = "suspend",
        /// Putting it to sleep after its idle time.
        Sleep = "sleep",
    }
}

states! {
    /// How a `verify` run ended (`verify_results.outcome`).
    VerifyOutcome {
        /// Every command passed.
        Passed = "passed",
        /// A command failed (or none could run).
        Failed = "failed",
        /// A daemon restart cut it short.
        Interrupted = "interrupted",
    }
}

states! {
    /// What `gc` found (`SweepItem::kind`).
    SweepKind {
        /// A slice left in provisioning or teardown with no live world.
        Slice = "slice",
        /// A worktree folder under the worktree root no world records.
        Worktree = "worktree",
        /// A worktree git lists whose folder is gone.
        Registration = "registration",
        /// A golden template (and its marker) of a project this daemon
        /// does not know.
        GoldenMarker = "golden_marker",
        /// A golden template of a known project whose key no world's
        /// branch has now.
        Template = "template",
        /// A spare clone of a golden template whose making or taking a
        /// crash cut short, or whose template is gone or was rebuilt.
        Spare = "spare",
        /// A login user Binky made for a slice that is gone (an
        /// interrupted teardown), on a server a project's config names.
        User = "user",
    }
}

states! {
    /// What `gc` did with one thing it found (`SweepItem::result`); the
    /// item's `outcome` says it in words.
    SweepResult {
        /// A dry run: it would be swept.
        WouldSweep = "would_sweep",
        /// Deleted.
        Swept = "swept",
        /// Its record (or marker) was dropped: the thing itself was not on
        /// its server, so nothing was deleted there.
        Forgotten = "forgotten",
        /// Left as it was; the outcome says why and what to do.
        NotSwept = "not_swept",
    }
}

impl Intent {
    /// The command that does again what this verb was doing for `world`
    /// (a suspension is undone by `up`: there is no `suspend` verb).
    pub fn retry(self, world: &str) -> String {
        let verb = match self {
            Intent::Suspend | Intent::Sleep => "up",
            other => other.as_str(),
        };
        format!("binky {verb} {world}")
    }
}

impl WorldState {
    /// Whether the world's processes are (meant to be) up.
    pub fn is_live(self) -> bool {
        matches!(self, WorldState::Running | WorldState::Starting)
    }
}

impl ServiceState {
    /// Whether the proxy sends requests to it: its own process answers, or
    /// answered and may still (an unhealthy service keeps its route).
    pub fn serves(self) -> bool {
        matches!(self, ServiceState::Running | ServiceState::Unhealthy)
    }

    /// Whether it is expected to serve soon (the proxy waits for it).
    pub fn is_coming(self) -> bool {
        matches!(self, ServiceState::Starting | ServiceState::Restarting)
    }
}

/// A state word no enum knows: a registry written by a newer Binky, or a
/// hand edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownState {
    /// Which enum was asked.
    pub kind: &'static str,
    /// The text it was given.
    pub text: String,
}

impl std::fmt::Display for UnknownState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown {} `{}`", self.kind, self.text)
    }
}

impl std::error::Error for UnknownState {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    /// Every state's text survives serde, `FromStr` and `Display`, and serde
    /// writes exactly the word the registry stores.
    fn round_trip<T>(all: &[T])
    where
        T: Copy + PartialEq + std::fmt::Debug + std::fmt::Display + FromStr,
        T: Serialize + for<'de> Deserialize<'de>,
        <T as FromStr>::Err: std::fmt::Debug,
    {
        let mut seen = std::collections::HashSet::new();
        for &s in all {
            let text = s.to_string();
            assert!(seen.insert(text.clone()), "{text} spelled twice");
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{text}\""));
            assert_eq!(
                serde_json::from_str::<T>(&format!("\"{text}\"")).unwrap(),
                s
            );
            assert_eq!(T::from_str(&text).unwrap(), s);
        }
    }

    #[test]
    fn states_round_trip() {
        round_trip(WorldState::ALL);
        round_trip(ServiceState::ALL);
        round_trip(SliceState::ALL);
        round_trip(ServiceKind::ALL);
        round_trip(Intent::ALL);
        round_trip(VerifyOutcome::ALL);
        round_trip(SweepKind::ALL);
        round_trip(SweepResult::ALL);
    }

    /// Every variant's word, written out once more: the registry stores
    /// these and clients match on them, so renaming a variant, or editing
    /// its word in the table above, must fail here rather than strand the
    /// rows and clients that hold the old word.
    #[test]
    fn every_word_is_pinned() {
        fn words<T: std::fmt::Display>(all: &[T]) -> String {
            all.iter().map(T::to_string).collect::<Vec<_>>().join(" ")
        }
        let pinned = [
            (
                words(WorldState::ALL),
                "starting running stopping stopped failed queued suspended sleeping removed",
            ),
            (
                words(ServiceState::ALL),
                "starting running unhealthy restarting stopped failed provisioned suspended sleeping",
            ),
            (words(SliceState::ALL), "provisioning live teardown"),
            (words(ServiceKind::ALL), "process resource"),
            (words(Intent::ALL), "up down reload remove suspend sleep"),
            (words(VerifyOutcome::ALL), "passed failed interrupted"),
            (
                words(SweepKind::ALL),
                "slice worktree registration golden_marker template spare user",
            ),
            (
                words(SweepResult::ALL),
                "would_sweep swept forgotten not_swept",
            ),
        ];
        for (got, want) in pinned {
            assert_eq!(got, want);
        }
    }

    /// An interrupted verb is retried with a verb that exists: a suspension
    /// is undone by `up` (there is no `binky suspend`).
    #[test]
    fn every_retry_names_a_verb_binky_has() {
        for &i in Intent::ALL {
            let retry = i.retry("w");
            let verb = retry.split(' ').nth(1).unwrap();
            assert!(
                ["up", "down", "reload", "remove"].contains(&verb),
                "{i}: {retry}"
            );
        }
        assert_eq!(Intent::Suspend.retry("feat"), "binky up feat");
        assert_eq!(Intent::Sleep.retry("feat"), "binky up feat");
        assert_eq!(Intent::Reload.retry("feat"), "binky reload feat");
    }

    #[test]
    fn unknown_words_are_named() {
        let e = WorldState::from_str("runnin").unwrap_err();
        assert_eq!(e.to_string(), "unknown WorldState `runnin`");
        assert!(serde_json::from_str::<ServiceState>("\"Running\"").is_err());
    }

    #[test]
    fn the_wire_keeps_the_old_words() {
        // The words written before the enums existed, as registries and
        // clients of earlier builds hold them.
        for (w, s) in [
            ("running", WorldState::Running),
            ("stopped", WorldState::Stopped),
            ("failed", WorldState::Failed),
            ("starting", WorldState::Starting),
        ] {
            assert_eq!(WorldState::from_str(w).unwrap(), s);
        }
        assert_eq!(ServiceState::Restarting.as_str(), "restarting");
        assert_eq!(SliceState::Live.as_str(), "live");
        assert!(ServiceState::Unhealthy.serves() && !ServiceState::Failed.serves());
        assert!(ServiceState::Restarting.is_coming() && !ServiceState::Running.is_coming());
    }
}
