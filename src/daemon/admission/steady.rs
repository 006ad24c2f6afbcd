//! Deciding on noisy memory readings: when a shortfall below the RAM reserve
//! is real enough to suspend a world, and when headroom has lasted long
//! enough to resume one. Pure (readings and times in, a verdict out), so the
//! rules are tested on synthetic series below.
//!
//! `MemAvailable` moves by hundreds of MiB on its own as other programs
//! allocate and free (about 550 MiB peak to trough was seen on a loaded
//! machine), so one reading below the reserve is no reason to act. As
//! control loops do, a verdict needs a signal that lasted and that stands
//! out of the noise:
//!
//! - **Suspend** when every reading of the last [`SUSTAIN`] (at least
//!   [`SUSTAIN_SAMPLES`] of them) is below the reserve and their mean is
//!   below it by more than the noise band; at once when the kernel reports
//!   tasks stalled on memory (PSI: the pressure is real) or a reading falls
//!   far below the reserve (further than any noise: a raised reserve, a
//!   sudden large allocation).
//! - The **last running world** goes only when the pressure is beyond
//!   doubt ([`Shortfall::takes_the_last_world`]): a far drop, or stalls
//!   that took at least [`LAST_WORLD_STALL`] % of the last 10 s. A single
//!   stall trigger is common on a machine whose page cache is squeezed
//!   (another program's files read back in), and suspending every world
//!   does not end a shortage other programs cause.
//! - **Resume** only on the lowest reading of the last [`SUSTAIN`]: the
//!   headroom must have lasted, and a resume also needs a margin of at least
//!   the noise band on top of the world's footprint.
//! - The **noise band** is half the spread (highest − lowest) of the
//!   readings of the last [`WINDOW`], and never under [`MIN_BAND`].

use std::collections::VecDeque;

const MIB: u64 = 1 << 20;

/// Readings older than this are forgotten; the band is measured over it.
pub(crate) const WINDOW: u64 = 30_000;
/// How long a shortfall (or headroom) must last, ms.
pub(crate) const SUSTAIN: u64 = 5_000;
/// The fewest readings a lasting shortfall or headroom is judged on.
pub(crate) const SUSTAIN_SAMPLES: usize = 3;
/// The least noise band, bytes: readings closer to the reserve than this are
/// never taken for a shortfall.
pub(crate) const MIN_BAND: u64 = 128 * MIB;
/// A reading below the reserve by more than this (or four noise bands, if
/// more) is acted on at once, bytes.
pub(crate) const FAR: u64 = 1 << 30;
/// The share of the last 10 s (the kernel's `some avg10`, percent) in
/// which tasks stalled on memory that makes a stall take the last running
/// world too. A trigger alone means 150 ms in 2 s somewhere on the machine;
/// a tenth of the time stalled is a machine that thrashes.
pub(crate) const LAST_WORLD_STALL: f64 = 10.0;

/// Recent `MemAvailable` readings, oldest first: `(ms, bytes)`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Trend {
    readings: VecDeque<(u64, u64)>,
}

impl Trend {
    /// Adds a reading taken at `at` ms (monotonic), forgetting those older
    /// than [`WINDOW`].
    pub(crate) fn push(&mut self, at: u64, available: u64) {
        self.readings.push_back((at, available));
        while self
            .readings
            .front()
            .is_some_and(|(t, _)| at.saturating_sub(*t) > WINDOW)
        {
            self.readings.pop_front();
        }
    }

    /// Forgets every reading (nothing runs, nothing to judge).
    pub(crate) fn clear(&mut self) {
        self.readings.clear();
    }

    /// The newest reading, bytes.
    pub(crate) fn latest(&self) -> Option<u64> {
        self.readings.back().map(|(_, b)| *b)
    }

    /// The noise band: half the spread of the window's readings, at least
    /// [`MIN_BAND`], bytes.
    pub(crate) fn band(&self) -> u64 {
        spread_band(self.readings.iter().map(|(_, b)| *b))
    }

    /// The band as it was before the newest reading: what a sudden drop is
    /// measured against (the drop itself is no noise).
    fn band_before(&self) -> u64 {
        let n = self.readings.len().saturating_sub(1);
        spread_band(self.readings.iter().take(n).map(|(_, b)| *b))
    }

    /// The readings of the last [`SUSTAIN`] when there are enough of them
    /// (at least [`SUSTAIN_SAMPLES`], and the trend reaching back at least
    /// [`SUSTAIN`]); `None` while a verdict cannot be lasting yet.
    fn sustained(&self) -> Option<Vec<u64>> {
        let &(now, _) = self.readings.back()?;
        let first = self.readings.front()?.0;
        if now.saturating_sub(first) < SUSTAIN {
            return None;
        }
        let recent: Vec<u64> = self
            .readings
            .iter()
            .filter(|(t, _)| now - t <= SUSTAIN)
            .map(|(_, b)| *b)
            .collect();
        (recent.len() >= SUSTAIN_SAMPLES).then_some(recent)
    }

    /// The lowest reading of the last [`SUSTAIN`]: headroom that lasted.
    /// `None` until there are enough readings.
    pub(crate) fn steady(&self) -> Option<u64> {
        self.sustained()?.into_iter().min()
    }

    /// Whether the readings say a world should be suspended to keep
    /// `reserve` free, and why (see the module's rules). `stalled`: the
    /// kernel reported tasks stalled on memory since the last reading, with
    /// the share of the last 10 s they stalled (`some avg10`, percent).
    pub(crate) fn shortfall(&self, reserve: u64, stalled: Option<f64>) -> Option<Shortfall> {
        let latest = self.latest()?;
        let band = self.band();
        if latest >= reserve {
            return None;
        }
        if let Some(share) = stalled {
            return Some(Shortfall::Stall {
                available: latest,
                share,
            });
        }
        if reserve - latest > FAR.max(4 * self.band_before()) {
            return Some(Shortfall::Far { available: latest });
        }
        let recent = self.sustained()?;
        let highest = *recent.iter().max()?;
        let mean = recent.iter().sum::<u64>() / recent.len() as u64;
        (highest < reserve && reserve - mean > band).then_some(Shortfall::Lasting {
            mean,
            highest,
            readings: recent.len(),
            band,
        })
    }
}

/// Why a world is suspended, with the figures that decided it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Shortfall {
    /// The kernel reported tasks stalled on memory, and available RAM was
    /// below the reserve.
    Stall {
        /// The reading, bytes.
        available: u64,
        /// The share of the last 10 s tasks stalled on memory, percent
        /// (the kernel's `some avg10`, which it updates every 2 s).
        share: f64,
    },
    /// One reading fell below the reserve by more than any noise.
    Far {
        /// The reading, bytes.
        available: u64,
    },
    /// Every reading of the last [`SUSTAIN`] was below the reserve, their
    /// mean by more than the noise band.
    Lasting {
        /// Their mean, bytes.
        mean: u64,
        /// The highest of them, bytes.
        highest: u64,
        /// How many.
        readings: usize,
        /// The noise band, bytes.
        band: u64,
    },
}

impl Shortfall {
    /// Whether this shortfall suspends the last running world too: a far
    /// drop, or stalls of at least [`LAST_WORLD_STALL`] % of the last 10 s.
    /// A lasting shortfall never does (see the module's rules).
    pub(crate) fn takes_the_last_world(&self) -> bool {
        match *self {
            Shortfall::Stall { share, .. } => share >= LAST_WORLD_STALL,
            Shortfall::Far { .. } => true,
            Shortfall::Lasting { .. } => false,
        }
    }

    /// The reason as `status` and the event show it, against `reserve`
    /// (`pct` % of RAM): every figure distinct where the values are.
    pub(crate) fn describe(&self, reserve: u64, pct: u32) -> String {
        match *self {
            Shortfall::Stall { available, share } => {
                let (a, r) = apart(available, reserve);
                format!(
                    "the kernel reported tasks stalled on memory ({share:.2} % of the last 10 s), with {a} available, below the reserve {r} ({pct} %)"
                )
            }
            Shortfall::Far { available } => {
                let (a, r) = apart(available, reserve);
                format!(
                    "available RAM {a} fell far below the reserve {r} ({pct} %), beyond any noise"
                )
            }
            Shortfall::Lasting {
                mean,
                highest,
                readings,
                band,
            } => {
                let (m, r) = apart(mean, reserve);
                let (h, _) = apart(highest, reserve);
                format!(
                    "available RAM stayed below the reserve {r} ({pct} %) for {}s: {readings} readings, the highest {h}, their mean {m}, {} below it (more than the noise band {})",
                    SUSTAIN / 1000,
                    gib_fine(reserve - mean),
                    gib_fine(band)
                )
            }
        }
    }
}

/// Half of highest − lowest of `readings`, at least [`MIN_BAND`].
fn spread_band(readings: impl Iterator<Item = u64> + Clone) -> u64 {
    let hi = readings.clone().max().unwrap_or(0);
    let lo = readings.min().unwrap_or(0);
    ((hi - lo) / 2).max(MIN_BAND)
}

/// `n` bytes as GiB to two decimals.
pub(crate) fn gib_fine(n: u64) -> String {
    format!("{:.2} GiB", n as f64 / (1u64 << 30) as f64)
}

/// `a` and `b` as GiB with as many decimals (one to three) as it takes for
/// two different values to read differently; MiB, then bytes, when even
/// three do not.
pub(crate) fn apart(a: u64, b: u64) -> (String, String) {
    let g = |n: u64, d: usize| format!("{:.*} GiB", d, n as f64 / (1u64 << 30) as f64);
    for d in 1..=3 {
        let (x, y) = (g(a, d), g(b, d));
        if x != y || a == b {
            return (x, y);
        }
    }
    let m = |n: u64| format!("{:.1} MiB", n as f64 / MIB as f64);
    if m(a) != m(b) {
        return (m(a), m(b));
    }
    (format!("{a} bytes"), format!("{b} bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const GIB: u64 = 1 << 30;

    fn trend(readings: &[(u64, u64)]) -> Trend {
        let mut t = Trend::default();
        for &(at, b) in readings {
            t.push(at, b);
        }
        t
    }

    #[test]
    fn one_reading_below_the_reserve_is_no_shortfall() {
        let reserve = 20 * GIB;
        let t = trend(&[(0, 21 * GIB), (2000, 21 * GIB), (4000, reserve - 200 * MIB)]);
        assert_eq!(t.shortfall(reserve, None), None);
        // The kernel saying tasks stall is: at once.
        let stall = t.shortfall(reserve, Some(0.4)).expect("a stall");
        assert_eq!(
            stall,
            Shortfall::Stall {
                available: reserve - 200 * MIB,
                share: 0.4
            }
        );
        // Not the last world, on a stall of 0.4 % of the last 10 s (a
        // squeezed page cache read back in: it failed CI once)…
        assert!(!stall.takes_the_last_world());
        assert!(
            stall
                .describe(reserve, 80)
                .contains("stalled on memory (0.40 % of the last 10 s)"),
            "{}",
            stall.describe(reserve, 80)
        );
        // …but on one that took a tenth of it, or more.
        let thrash = t.shortfall(reserve, Some(LAST_WORLD_STALL)).unwrap();
        assert!(thrash.takes_the_last_world());
        // Nor are stalls with RAM above the reserve any shortfall.
        assert_eq!(t.shortfall(reserve - 300 * MIB, Some(50.0)), None);
    }

    #[test]
    fn a_lasting_shortfall_beyond_the_band_suspends_and_says_its_figures() {
        let reserve = 20 * GIB;
        let t = trend(&[
            (0, reserve - 500 * MIB),
            (2000, reserve - 600 * MIB),
            (4000, reserve - 450 * MIB),
            (6000, reserve - 550 * MIB),
        ]);
        let s = t.shortfall(reserve, None).expect("lasting");
        assert!(!s.takes_the_last_world());
        let text = s.describe(reserve, 83);
        assert!(
            text.starts_with("available RAM stayed below the reserve 20.0 GiB (83 %)"),
            "{text}"
        );
        assert!(
            text.contains("the highest 19.6 GiB") && text.contains("0.52 GiB below it"),
            "{text}"
        );
    }

    #[test]
    fn a_far_drop_is_acted_on_at_once() {
        let t = trend(&[(0, 10 * GIB), (500, 3 * GIB)]);
        let s = t.shortfall(5 * GIB, None);
        assert!(matches!(s, Some(Shortfall::Far { .. })), "{s:?}");
        assert!(s.unwrap().takes_the_last_world());
    }

    #[test]
    fn headroom_counts_only_once_it_lasted() {
        let mut t = trend(&[(0, 5 * GIB), (1000, 9 * GIB)]);
        assert_eq!(t.steady(), None, "too few readings, too short");
        t.push(3000, 8 * GIB);
        t.push(5000, 9 * GIB);
        // The lowest reading of the last 5 s, the 5 GiB one at 0 ms included.
        assert_eq!(t.steady(), Some(5 * GIB));
        t.push(6000, 9 * GIB);
        assert_eq!(t.steady(), Some(8 * GIB));
    }

    #[test]
    fn two_different_figures_never_read_the_same() {
        let (a, b) = apart(22_118_000_000, 22_119_000_000);
        assert_ne!(a, b);
        assert_eq!(
            apart(GIB, GIB),
            ("1.0 GiB".to_owned(), "1.0 GiB".to_owned())
        );
        let (a, b) = apart(20 * GIB + 100, 20 * GIB + 200);
        assert_ne!(a, b, "bytes when nothing coarser tells them apart");
        let (a, b) = apart(20 * GIB, 20 * GIB + 5 * MIB);
        assert_eq!((a.as_str(), b.as_str()), ("20.000 GiB", "20.005 GiB"));
        let (a, b) = apart(20 * GIB, 20 * GIB + MIB / 2);
        assert_eq!((a.as_str(), b.as_str()), ("20480.0 MiB", "20480.5 MiB"));
    }

    proptest! {
        /// Noise up to ±amp (under 1 GiB) that rises above the line at
        /// least once in any [`SUSTAIN`] never suspends without a stall,
        /// however far below the line its troughs reach.
        #[test]
        fn noise_that_returns_above_the_line_never_suspends(
            amp_mib in 50u64..900,
            offset_mib in 0u64..400,
            mut pattern in prop::collection::vec(-1.0f64..1.0, 2..=5),
            step_ms in 250u64..=1000,
            repeats in 8usize..40,
        ) {
            let reserve = 16 * GIB;
            let amp = amp_mib * MIB;
            let mean = reserve + offset_mib * MIB + 1;
            pattern[0] = 1.0;
            let mut t = Trend::default();
            for i in 0..pattern.len() * repeats {
                let b = (mean as f64 + pattern[i % pattern.len()] * amp as f64) as u64;
                t.push(i as u64 * step_ms, b);
                prop_assert_eq!(t.shortfall(reserve, None), None, "reading {}", b);
            }
        }

        /// A mean clearly below the line (by twice the noise) is found
        /// within the window, and then stays found.
        #[test]
        fn a_mean_well_below_the_line_is_found(
            amp_mib in 50u64..300,
            wiggle in prop::collection::vec(-1.0f64..1.0, 40..80),
        ) {
            let reserve = 16 * GIB;
            let amp = amp_mib * MIB;
            let mean = reserve - 2 * amp - MIN_BAND;
            let mut t = Trend::default();
            let mut found = None;
            for (i, w) in wiggle.iter().enumerate() {
                let b = (mean as f64 + w * amp as f64) as u64;
                t.push(i as u64 * 1000, b);
                if t.shortfall(reserve, None).is_some() && found.is_none() {
                    found = Some(i);
                }
            }
            prop_assert!(found.is_some_and(|i| i <= 31), "{:?}", found);
        }
    }
}
