//! Execution segments: `--shard I/N` runs exactly shard I's part of the plan, so that N
//! processes (on one host or many) together send what one process would.
//!
//! Every unit of work the plan hands out has a number that does not depend on how many
//! processes run it: a player's id (0, 1, 2, … in arrival order, as one process numbers
//! them), a hammer worker's index, an open-model arrival's index, a catalog request's place.
//! A shard owns the numbers `≡ I (mod N)` (players in blocks of the largest group, so a group
//! forms inside one shard), and walks the whole plan's timeline so that its share starts at
//! the times one process would have started it.

use std::{fmt, str::FromStr};

/// Which part of the plan this process runs: shard `index` of `count` (0-based, as a
/// Kubernetes Indexed Job's completion index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Shard {
    /// 0 ≤ index < count.
    pub index: u32,
    /// How many shards the run has (1: the whole plan).
    pub count: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Self::WHOLE
    }
}

/// A `--shard` that is not `I/N` with 0 ≤ I < N.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--shard {given}: {why}; give I/N with 0 ≤ I < N, e.g. --shard 0/3, 1/3 and 2/3")]
pub struct ShardError {
    given: String,
    why: &'static str,
}

impl Shard {
    /// The whole plan in one process.
    pub const WHOLE: Shard = Shard { index: 0, count: 1 };

    /// Shard `index` of `count`, checked.
    pub fn new(index: u32, count: u32) -> Result<Self, ShardError> {
        let err = |why| ShardError {
            given: format!("{index}/{count}"),
            why,
        };
        if count == 0 {
            return Err(err("a run has at least one shard"));
        }
        if index >= count {
            return Err(err(
                "the index counts from 0, so it must be below the count",
            ));
        }
        Ok(Self { index, count })
    }

    /// True when this is the whole plan.
    pub fn is_whole(self) -> bool {
        self.count == 1
    }

    /// True when work item `n` (an arrival, a worker, a request) is this shard's.
    pub fn owns(self, n: u64) -> bool {
        n % u64::from(self.count) == u64::from(self.index)
    }

    /// True when player `id` is this shard's: players go in blocks of `block` (the largest
    /// group, so a group's seats are filled by players of one shard).
    pub fn owns_player(self, id: u64, block: u64) -> bool {
        self.owns(id / block.max(1))
    }

    /// This shard's part of `total` items dealt round-robin (`owns`): the first
    /// `total % count` shards get one more.
    pub fn share(self, total: u64) -> u64 {
        let n = u64::from(self.count);
        total / n + u64::from(u64::from(self.index) < total % n)
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for Shard {
    type Err = ShardError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why| ShardError {
            given: s.to_owned(),
            why,
        };
        let (i, n) = s
            .trim()
            .split_once('/')
            .ok_or_else(|| bad("it has no `/`"))?;
        let i: u32 = i.trim().parse().map_err(|_| bad("I is not a number"))?;
        let n: u32 = n.trim().parse().map_err(|_| bad("N is not a number"))?;
        Shard::new(i, n).map_err(|e| bad(e.why))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_reject_what_cannot_be_a_shard() {
        assert_eq!(
            "1/3".parse::<Shard>().unwrap(),
            Shard { index: 1, count: 3 }
        );
        assert_eq!("0/1".parse::<Shard>().unwrap(), Shard::WHOLE);
        for (bad, says) in [
            ("4/3", "must be below the count"),
            ("3/3", "must be below the count"),
            ("0/0", "at least one shard"),
            ("1", "no `/`"),
            ("a/3", "I is not a number"),
            ("1/-3", "N is not a number"),
        ] {
            let e = bad.parse::<Shard>().unwrap_err().to_string();
            assert!(e.contains(says) && e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn every_item_belongs_to_exactly_one_shard_and_shares_add_up() {
        for count in 1..=5u32 {
            let shards: Vec<Shard> = (0..count).map(|i| Shard::new(i, count).unwrap()).collect();
            for n in 0..100u64 {
                assert_eq!(shards.iter().filter(|s| s.owns(n)).count(), 1);
                assert_eq!(shards.iter().filter(|s| s.owns_player(n, 4)).count(), 1);
            }
            for total in 0..50u64 {
                let owned: u64 = shards.iter().map(|s| s.share(total)).sum();
                assert_eq!(owned, total);
                for s in &shards {
                    assert_eq!(
                        s.share(total),
                        (0..total).filter(|&n| s.owns(n)).count() as u64
                    );
                }
            }
        }
        // Blocks keep a group's seats together.
        let s = Shard::new(1, 3).unwrap();
        assert_eq!(
            (0..12)
                .filter(|&id| s.owns_player(id, 4))
                .collect::<Vec<_>>(),
            vec![4, 5, 6, 7]
        );
    }
}
