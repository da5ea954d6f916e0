//! Watches pods cluster-wide: binds unbound pods to this node and hands every pod bound to
//! it to its own worker task, forwarding each update (or its disappearance).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::binder::{self, BindSite};
use crate::cli::Binding;
use crate::ctx::NodeCtx;
use crate::log::event;
use crate::pod::PodWorker;
use crate::storage::Storage;
use crate::tasks::TaskGuard;

struct WorkerHandle {
    updates: watch::Sender<Option<Pod>>,
    join: JoinHandle<()>,
}

/// Routes pod events to binding and to pod workers.
pub struct Dispatcher {
    ctx: Arc<NodeCtx>,
    site: Arc<BindSite>,
    /// Whether this node binds pending pods (no scheduler runs).
    binds: bool,
    workers: HashMap<String, WorkerHandle>,
    finished: HashSet<String>,
    /// Pods being bound, by uid: dropping the guard stops the binding task.
    binding: HashMap<String, TaskGuard>,
    relisted: Option<HashSet<String>>,
    done_tx: mpsc::UnboundedSender<String>,
    done_rx: mpsc::UnboundedReceiver<String>,
    shutdown: CancellationToken,
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

impl Dispatcher {
    /// A dispatcher for the node (its pods' claims looked up in `storage`; pending pods
    /// bound by it when `binding` says so); workers stop when `shutdown` is cancelled.
    pub fn new(
        ctx: Arc<NodeCtx>,
        node_labels: BTreeMap<String, String>,
        (storage, binding): (Arc<Storage>, Binding),
        shutdown: CancellationToken,
    ) -> Dispatcher {
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        let site = Arc::new(BindSite {
            client: ctx.client.clone(),
            node: ctx.node_name.clone(),
            labels: node_labels,
            storage,
        });
        Dispatcher {
            ctx,
            site,
            binds: binding == Binding::Node,
            workers: HashMap::new(),
            finished: HashSet::new(),
            binding: HashMap::new(),
            relisted: None,
            done_tx,
            done_rx,
            shutdown,
        }
    }

    fn is_mine(&self, pod: &Pod) -> bool {
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(self.ctx.node_name.as_str())
    }

    fn on_pod(&mut self, pod: Pod) {
        let uid = uid_of(&pod);
        if let Some(seen) = &mut self.relisted {
            seen.insert(uid.clone());
        }
        if self.binds && binder::wants_binding(&pod, &self.site.labels) {
            if !self.binding.contains_key(&uid) {
                let task = binder::bind_when_ready(self.site.clone(), pod);
                self.binding.insert(uid, TaskGuard::spawn(task));
            }
            return;
        }
        self.binding.remove(&uid);
        if !self.is_mine(&pod) || self.finished.contains(&uid) {
            return;
        }
        if let Some(worker) = self.workers.get(&uid) {
            worker.updates.send_replace(Some(pod));
            return;
        }
        let worker = PodWorker::new(self.ctx.clone(), pod.clone());
        let (updates, rx) = watch::channel(Some(pod));
        let done = self.done_tx.clone();
        let shutdown = self.shutdown.clone();
        let worker_uid = uid.clone();
        let join = tokio::spawn(async move {
            worker.run(rx, shutdown).await;
            let _ = done.send(worker_uid);
        });
        self.workers.insert(uid, WorkerHandle { updates, join });
    }

    fn on_delete(&mut self, pod: Pod) {
        let uid = uid_of(&pod);
        self.binding.remove(&uid);
        self.finished.remove(&uid);
        if let Some(worker) = self.workers.get(&uid) {
            worker.updates.send_replace(None);
        }
    }

    fn on_event(&mut self, ev: watcher::Event<Pod>) {
        match ev {
            watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => self.on_pod(pod),
            watcher::Event::Delete(pod) => self.on_delete(pod),
            watcher::Event::Init => self.relisted = Some(HashSet::new()),
            watcher::Event::InitDone => {
                if let Some(seen) = self.relisted.take() {
                    for (uid, worker) in &self.workers {
                        if !seen.contains(uid) {
                            worker.updates.send_replace(None);
                        }
                    }
                    self.finished.retain(|uid| seen.contains(uid));
                }
            }
        }
    }

    /// Consumes the pod watch until shutdown, then waits for every worker to stop.
    pub async fn run(
        mut self,
        events: impl Stream<Item = Result<watcher::Event<Pod>, watcher::Error>>,
    ) {
        let mut events = std::pin::pin!(events);
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => break,
                ev = events.next() => match ev {
                    Some(Ok(ev)) => self.on_event(ev),
                    Some(Err(e)) => event!("pod watch error (retrying): {e}"),
                    None => break,
                },
                Some(uid) = self.done_rx.recv() => {
                    self.workers.remove(&uid);
                    self.finished.insert(uid);
                }
            }
        }
        for (_, worker) in self.workers.drain() {
            let _ = worker.join.await;
        }
    }
}
