//! Groups: players assembled into groups of k (a game's seats) by a setup sequence — the
//! group's first player runs the create op and its `group.*` captures become the group's
//! variables; every other member copies them and runs the join op — then play together
//! until the finish condition is seen, when the group leaves the rotation and its players
//! go back to the lobby to form new groups (at most `rounds` each).
//!
//! The [`Lobby`] hands out seats in arrival order: a group is filled before the next one
//! opens. A group whose create or a join fails is `failed`; one a member leaves before it
//! finished (retired by a step, or stopped) is `abandoned`. Either way its other players
//! go back to the lobby.

use std::sync::{
    Arc, Mutex,
    atomic::{AtomicU64, Ordering::SeqCst},
};

use tokio::sync::watch;

use crate::{
    measure::play::{GroupEvent, PlayAcc},
    outcome::json_eq,
    player::{Reply, Session, Stopped},
    scenario::{Finish, GroupSpec, Scenario},
    template::GROUP_PREFIX,
};
use herd_model::Outcome;

/// How a group ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Finished,
    Failed,
    Abandoned,
}

#[derive(Debug, Clone, Default)]
struct State {
    /// The group's variables (slot, value), once the create op captured them.
    vars: Option<Arc<[(usize, String)]>>,
    /// Members whose join ended `ok`.
    joined: usize,
    end: Option<End>,
}

struct Group {
    size: usize,
    /// Seats handed out; changed only under the lobby's lock.
    taken: usize,
    state: watch::Sender<State>,
}

/// Where players wait for a group.
pub(crate) struct Lobby {
    spec: GroupSpec,
    seed: u64,
    play: Arc<PlayAcc>,
    /// The group being filled.
    open: Mutex<Option<Arc<Mutex<Group>>>>,
    groups: AtomicU64,
}

impl Lobby {
    pub fn new(scenario: &Scenario, play: Arc<PlayAcc>) -> Option<Self> {
        Some(Self {
            spec: scenario.group.clone()?,
            seed: scenario.random_seed,
            play,
            open: Mutex::new(None),
            groups: AtomicU64::new(0),
        })
    }

    /// The next free seat: in the group being filled, or the first of a new one.
    fn seat(self: &Arc<Self>) -> Seat {
        let mut open = self
            .open
            .lock()
            .expect("the lobby's lock is never held across a panic");
        let fresh = open.as_ref().is_none_or(|g| {
            let g = g
                .lock()
                .expect("a group's lock is never held across a panic");
            g.taken >= g.size || g.state.borrow().end.is_some()
        });
        if fresh {
            let n = self.groups.fetch_add(1, SeqCst);
            let span = (self.spec.max - self.spec.min + 1) as u64;
            let size = self.spec.min + (mix(self.seed ^ n) % span) as usize;
            *open = Some(Arc::new(Mutex::new(Group {
                size,
                taken: 0,
                state: watch::channel(State::default()).0,
            })));
        }
        let group = open.clone().expect("set above");
        let (index, size, state) = {
            let mut g = group
                .lock()
                .expect("a group's lock is never held across a panic");
            g.taken += 1;
            (g.taken - 1, g.size, g.state.subscribe())
        };
        if index + 1 == size {
            *open = None;
        }
        Seat {
            group,
            lobby: self.clone(),
            index,
            size,
            state,
        }
    }
}

/// splitmix64's finalizer: a group's size from the run's seed and the group's number.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A player's place in one group.
struct Seat {
    group: Arc<Mutex<Group>>,
    lobby: Arc<Lobby>,
    index: usize,
    size: usize,
    state: watch::Receiver<State>,
}

impl Seat {
    fn sender<R>(&self, f: impl FnOnce(&watch::Sender<State>) -> R) -> R {
        let g = self
            .group
            .lock()
            .expect("a group's lock is never held across a panic");
        f(&g.state)
    }

    /// Ends the group (first end wins, and is counted).
    fn end(&self, end: End) {
        let first = self.sender(|s| {
            s.send_if_modified(|st| {
                if st.end.is_some() {
                    return false;
                }
                st.end = Some(end);
                true
            })
        });
        if first {
            self.lobby.play.group(match end {
                End::Finished => GroupEvent::Finished,
                End::Failed => GroupEvent::Failed,
                End::Abandoned => GroupEvent::Abandoned,
            });
        }
    }

    fn playing(&self) -> bool {
        let st = self.state.borrow();
        st.end.is_none() && st.vars.is_some() && st.joined + 1 >= self.size
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        self.end(End::Abandoned);
    }
}

/// A session's group membership.
#[derive(Default)]
pub(crate) struct Membership {
    seat: Option<Seat>,
    rounds: u64,
}

impl Session {
    /// Takes a seat in a group of the scenario's `[group]` and plays this player's part in
    /// forming it (the create op for the group's first player, else waiting for the
    /// group's variables and the join op). `Ok(true)` once the group is complete and
    /// playing (at once if it already is); `Ok(false)` if the formation failed or another
    /// member left, and the player is back in the lobby. [`Stopped`] when the player stops,
    /// has played `rounds` groups, or the scenario has no `[group]`.
    pub async fn join_group(&mut self) -> Result<bool, Stopped> {
        if self.group.seat.as_ref().is_some_and(Seat::playing) {
            return Ok(true);
        }
        self.group.seat = None;
        let lobby = self.shared.lobby.clone().ok_or(Stopped)?;
        if lobby.spec.rounds.is_some_and(|r| self.group.rounds >= r) {
            return Err(Stopped);
        }
        let seat = lobby.seat();
        let (index, size) = (seat.index, seat.size);
        let mut state = seat.state.clone();
        self.group.seat = Some(seat);
        if index == 0 {
            let reply = self.call(lobby.spec.create).await?;
            if !reply.outcome.is_ok() {
                return Ok(self.formation_failed());
            }
            let names = &self.shared.scenario.vars;
            let vars: Arc<[(usize, String)]> = (0..names.len())
                .filter(|&s| names.name(s).starts_with(GROUP_PREFIX))
                .filter_map(|s| Some((s, self.vars.get(s)?.to_owned())))
                .collect();
            self.with_seat(|seat| {
                seat.sender(|s| s.send_modify(|st| st.vars = Some(vars)));
            });
            if size == 1 {
                lobby.play.group(GroupEvent::Formed);
            }
        } else {
            let known = async {
                let st = state
                    .wait_for(|st| st.vars.is_some() || st.end.is_some())
                    .await
                    .ok()?;
                if st.end.is_some() {
                    None
                } else {
                    st.vars.clone()
                }
            };
            let Some(vars) = self.until(known).await? else {
                return Ok(self.back_to_lobby());
            };
            for (slot, v) in vars.iter() {
                self.vars.set(*slot, v.clone());
            }
            let reply = self.call(lobby.spec.join).await?;
            if !reply.outcome.is_ok() {
                return Ok(self.formation_failed());
            }
            let complete = self.with_seat(|seat| {
                seat.sender(|s| {
                    let mut complete = false;
                    s.send_modify(|st| {
                        st.joined += 1;
                        complete = st.joined + 1 == size && st.end.is_none();
                    });
                    complete
                })
            });
            if complete == Some(true) {
                lobby.play.group(GroupEvent::Formed);
            }
        }
        let full = async {
            state
                .wait_for(|st| st.end.is_some() || st.joined + 1 >= size)
                .await
                .is_ok_and(|st| st.end.is_none())
        };
        if !self.until(full).await? {
            return Ok(self.back_to_lobby());
        }
        self.group.rounds += 1;
        Ok(true)
    }

    fn with_seat<R>(&self, f: impl FnOnce(&Seat) -> R) -> Option<R> {
        self.group.seat.as_ref().map(f)
    }

    fn formation_failed(&mut self) -> bool {
        if let Some(seat) = self.group.seat.take() {
            seat.end(End::Failed);
        }
        false
    }

    fn back_to_lobby(&mut self) -> bool {
        self.group.seat = None;
        false
    }

    /// True while this player sits in a complete group that has not ended.
    pub fn in_group(&self) -> bool {
        self.group.seat.as_ref().is_some_and(Seat::playing)
    }

    /// Marks this player's group finished (counted once per group, whoever sees it first)
    /// and leaves it; its other players leave at their next turn.
    pub fn finish_group(&mut self) {
        if let Some(seat) = self.group.seat.take() {
            seat.end(End::Finished);
        }
    }

    /// True if `reply` to op `op` meets the scenario's group finish condition.
    pub fn finishes_group(&self, op: usize, reply: &Reply) -> bool {
        let Some(f) = self
            .shared
            .lobby
            .as_ref()
            .and_then(|l| l.spec.finish.as_ref())
        else {
            return false;
        };
        match f {
            Finish::Code(c) => matches!(&reply.outcome, Outcome::Domain(d) if **d == **c),
            Finish::Json { op: only, json } => {
                if only.is_some_and(|o| o != op) {
                    return false;
                }
                let Ok(v) = serde_json::from_slice::<serde_json::Value>(&reply.body) else {
                    return false;
                };
                json.iter()
                    .all(|(p, want)| v.pointer(p).is_some_and(|got| json_eq(got, want)))
            }
        }
    }
}

impl Session {
    /// The index (in `[[group.role]]`) of this player's role, when its group has roles.
    pub(crate) fn role(&self) -> Option<usize> {
        let seat = self.group.seat.as_ref()?;
        let spec = &self.shared.lobby.as_ref()?.spec;
        let r = spec.role_of(seat.index)?;
        spec.roles.iter().position(|x| std::ptr::eq(x, r))
    }

    /// True if this player may open background op `op`: without roles every player opens
    /// every one; with them, the ones its role lists.
    pub(crate) fn role_opens(&self, op: usize) -> bool {
        let Some(spec) = self.shared.lobby.as_ref().map(|l| &l.spec) else {
            return true;
        };
        if spec.roles.is_empty() {
            return true;
        }
        self.role().is_some_and(|r| spec.roles[r].ops.contains(&op))
    }

    /// Whether group variables travel between members after `create` (some other op
    /// captures one).
    fn shares(&self) -> bool {
        self.shared.lobby.as_ref().is_some_and(|l| l.spec.shared)
    }

    /// Takes the group variables the other members published since this player's last op.
    pub(crate) fn sync_group(&mut self) {
        if !self.shares() {
            return;
        }
        let Some(vars) = self
            .group
            .seat
            .as_ref()
            .and_then(|s| s.state.borrow().vars.clone())
        else {
            return;
        };
        for (slot, v) in vars.iter() {
            if self.vars.get(*slot) != Some(v.as_str()) {
                self.vars.set(*slot, v.clone());
            }
        }
    }

    /// Publishes the group variables op `op` just captured to the other members.
    pub(crate) fn publish_group(&mut self, op: usize) {
        if !self.shares() || self.group.seat.is_none() {
            return;
        }
        let shared = self.shared.clone();
        let names = &shared.scenario.vars;
        let captured: Vec<(usize, String)> = shared.scenario.ops[op]
            .captures
            .iter()
            .filter(|(s, _)| names.name(*s).starts_with(GROUP_PREFIX))
            .filter_map(|(s, _)| Some((*s, self.vars.get(*s)?.to_owned())))
            .collect();
        if captured.is_empty() {
            return;
        }
        self.with_seat(|seat| {
            seat.sender(|s| {
                s.send_modify(|st| {
                    let mut all: Vec<(usize, String)> =
                        st.vars.as_deref().map(<[_]>::to_vec).unwrap_or_default();
                    for (slot, v) in captured {
                        match all.iter_mut().find(|(s, _)| *s == slot) {
                            Some(e) => e.1 = v,
                            None => all.push((slot, v)),
                        }
                    }
                    st.vars = Some(all.into());
                })
            })
        });
    }

    /// Waits until this player's group ends (or the player stops): a role with nothing to
    /// pick (only a long poll, say) spends its turns here.
    pub(crate) async fn wait_group_end(&mut self) -> Result<(), Stopped> {
        let Some(mut state) = self.group.seat.as_ref().map(|s| s.state.clone()) else {
            return Ok(());
        };
        self.until(async move {
            let _ = state.wait_for(|st| st.end.is_some()).await;
        })
        .await
    }
}

/// The file player's group and stream state, between turns.
#[derive(Debug, Clone, Default)]
pub(crate) struct FileTurns {
    streams_opened: bool,
}

impl FileTurns {
    /// Before a loop turn: open the player's streams, and with a `[group]` be in a
    /// playing group (closing the last group's streams first). `Ok(false)`: the turn was
    /// spent in the lobby.
    pub async fn ready(&mut self, session: &mut Session) -> Result<bool, Stopped> {
        if session.shared.lobby.is_some() && !session.in_group() {
            if session.group.seat.is_some() {
                // Another member finished or left: this group is over for us too.
                session.group.seat = None;
            }
            session.close_streams(true);
            self.streams_opened = false;
            // Boxed: joining is rare and its future large; inline, it would size every
            // turn's future (allocated per turn) for it.
            if !Box::pin(session.join_group()).await? {
                return Ok(false);
            }
        }
        if !self.streams_opened {
            session.open_streams();
            self.streams_opened = true;
        }
        Ok(true)
    }

    /// After a loop op: leave the group if its reply finished it.
    pub fn after(&mut self, session: &mut Session, op: usize, reply: &Reply) {
        if session.group.seat.is_some() && session.finishes_group(op, reply) {
            session.finish_group();
            session.close_streams(true);
            self.streams_opened = false;
        }
    }
}
