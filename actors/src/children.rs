//! One child actor per watched object, kept by the watch's relist protocol ([`Roster`]):
//! the part every supervisor (EtcdCluster, EtcdBackup, EtcdRestore) shares. The owner says
//! how a child starts; [`Children`] decides when, tells a running child its object's new
//! spec, and retires the child of an object that is gone.

use std::collections::BTreeMap;
use std::fmt::Display;

use actix::{Actor, Addr, Context};
use slog::{Logger, info, warn};

use crate::roster::{Change, Roster, WatchEvent};

/// An actor that runs one watched object.
pub trait ChildActor: Actor<Context = Context<Self>> {
    /// What the actor needs of its object.
    type Spec: Send + 'static;

    /// Tells the running actor its object changed (or was listed again).
    fn changed(addr: &Addr<Self>, spec: Self::Spec);

    /// Tells the actor its object is gone; the owner drops its address right after, so
    /// the stop is final.
    fn retire(addr: &Addr<Self>);
}

/// The child actors of one kind of object, by key.
pub struct Children<K, A: ChildActor> {
    roster: Roster<K, A::Spec>,
    actors: BTreeMap<K, Addr<A>>,
    kind: &'static str,
    log: Logger,
}

impl<K: Ord + Clone + Display, A: ChildActor> Children<K, A> {
    /// No children yet; `kind` names them in the log (`cluster`, `backup`, `restore`).
    pub fn new(kind: &'static str, log: &Logger) -> Self {
        Children {
            roster: Roster::default(),
            actors: BTreeMap::new(),
            kind,
            log: log.clone(),
        }
    }

    /// Takes in one event of the watch: an object that is new (or whose actor has
    /// stopped) gets an actor from `start`, a running one hears its object's new spec,
    /// and the actor of an object that is gone is retired. Whether an actor was started or
    /// retired.
    pub fn on(
        &mut self,
        event: WatchEvent<K, A::Spec>,
        mut start: impl FnMut(&K, A::Spec) -> Addr<A>,
    ) -> bool {
        let mut changed = false;
        for change in self.roster.on(event, &self.actors) {
            match change {
                Change::Apply(key, spec) => match self.actors.get(&key).filter(|a| a.connected()) {
                    Some(actor) => A::changed(actor, spec),
                    None => {
                        info!(self.log, "starting an actor"; "kind" => self.kind,
                              "object" => %key);
                        let actor = start(&key, spec);
                        self.actors.insert(key, actor);
                        changed = true;
                    }
                },
                Change::Retire(key) => {
                    if let Some(actor) = self.actors.remove(&key) {
                        info!(self.log, "retiring an actor"; "kind" => self.kind,
                              "object" => %key);
                        A::retire(&actor);
                        changed = true;
                    }
                }
                Change::BeforeFirstList(key) => {
                    warn!(self.log, "ignoring an event that came before the first list";
                          "kind" => self.kind, "object" => %key);
                }
            }
        }
        changed
    }

    /// The actor of `key`, if it runs.
    pub fn get(&self, key: &K) -> Option<&Addr<A>> {
        self.actors.get(key)
    }

    /// The keys of the running actors, in order.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.actors.keys()
    }

    /// How many actors run.
    pub fn len(&self) -> usize {
        self.actors.len()
    }

    /// No actor runs.
    pub fn is_empty(&self) -> bool {
        self.actors.is_empty()
    }

    /// The first list has completed.
    pub fn synced(&self) -> bool {
        self.roster.synced()
    }

    /// A relist is in progress.
    pub fn relisting(&self) -> bool {
        self.roster.relisting()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use actix::{ActorContext, Handler, Message};

    use super::*;

    /// What the test children heard, in order: `start a=1`, `changed a=2`, `retire a`.
    type Heard = Arc<Mutex<Vec<String>>>;

    struct Probe {
        key: &'static str,
        heard: Heard,
    }

    #[derive(Message)]
    #[rtype(result = "()")]
    struct Stop;

    impl Actor for Probe {
        type Context = Context<Self>;
    }

    impl Handler<Stop> for Probe {
        type Result = ();
        fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
            ctx.stop();
        }
    }

    #[derive(Message)]
    #[rtype(result = "()")]
    struct Note(String);

    impl Handler<Note> for Probe {
        type Result = ();
        fn handle(&mut self, Note(what): Note, _: &mut Context<Self>) {
            self.heard
                .lock()
                .unwrap()
                .push(format!("{what} {}", self.key));
        }
    }

    impl ChildActor for Probe {
        type Spec = u32;
        fn changed(addr: &Addr<Self>, spec: u32) {
            addr.do_send(Note(format!("changed={spec}")));
        }
        fn retire(addr: &Addr<Self>) {
            addr.do_send(Note("retire".into()));
        }
    }

    fn children() -> Children<&'static str, Probe> {
        Children::new("probe", &Logger::root(slog::Discard, slog::o!()))
    }

    /// Feeds `event`, starting a probe (and noting it) for each new child.
    fn feed(
        children: &mut Children<&'static str, Probe>,
        heard: &Heard,
        event: WatchEvent<&'static str, u32>,
    ) -> bool {
        children.on(event, |key, spec| {
            heard.lock().unwrap().push(format!("start={spec} {key}"));
            let (key, heard) = (*key, heard.clone());
            Probe { key, heard }.start()
        })
    }

    /// Children whose first list held `a` (spec 1), and what they heard.
    fn with_a_listed() -> (Heard, Children<&'static str, Probe>) {
        let heard = Heard::default();
        let mut kids = children();
        for event in [
            WatchEvent::RelistStarted,
            WatchEvent::Relisted("a", 1),
            WatchEvent::RelistDone,
        ] {
            feed(&mut kids, &heard, event);
        }
        (heard, kids)
    }

    /// Lets the actors take their mailboxes in.
    async fn settle() {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }

    #[actix_rt::test]
    async fn a_child_starts_after_the_first_list_hears_its_changes_and_retires_when_gone() {
        let heard = Heard::default();
        let mut kids = children();
        assert!(!feed(&mut kids, &heard, WatchEvent::Applied("early", 1)));
        feed(&mut kids, &heard, WatchEvent::RelistStarted);
        feed(&mut kids, &heard, WatchEvent::Relisted("a", 1));
        assert!(
            kids.is_empty(),
            "nothing starts before the list is complete"
        );
        assert!(feed(&mut kids, &heard, WatchEvent::RelistDone));
        assert!(kids.synced());
        assert!(!feed(&mut kids, &heard, WatchEvent::Applied("a", 2)));
        assert!(feed(&mut kids, &heard, WatchEvent::Deleted("a")));
        settle().await;
        assert!(kids.is_empty());
        assert_eq!(
            *heard.lock().unwrap(),
            ["start=1 a", "changed=2 a", "retire a"],
            "the event before the first list is left out"
        );
    }

    #[actix_rt::test]
    async fn a_relist_that_no_longer_lists_a_child_retires_it_and_starts_the_new_ones() {
        let (heard, mut kids) = with_a_listed();
        feed(&mut kids, &heard, WatchEvent::RelistStarted);
        feed(&mut kids, &heard, WatchEvent::Relisted("b", 1));
        assert!(feed(&mut kids, &heard, WatchEvent::RelistDone));
        settle().await;
        assert_eq!(kids.keys().copied().collect::<Vec<_>>(), ["b"]);
        // Starts are noted at once, retirements when the actor reads its mailbox.
        let mut heard = heard.lock().unwrap().clone();
        heard.sort();
        assert_eq!(heard, ["retire a", "start=1 a", "start=1 b"]);
    }

    #[actix_rt::test]
    async fn a_child_whose_actor_stopped_is_started_again_on_its_next_change() {
        let (heard, mut kids) = with_a_listed();
        kids.get(&"a").unwrap().do_send(Stop);
        settle().await;
        assert!(feed(&mut kids, &heard, WatchEvent::Applied("a", 2)));
        settle().await;
        assert_eq!(kids.len(), 1);
        assert_eq!(*heard.lock().unwrap(), ["start=1 a", "start=2 a"]);
    }
}
