//! Actions that change etcd's membership of voters (promote a learner, hand leadership
//! over, remove a member) and disarm an alarm. Each goes through the MemberClient, which
//! orders them.

use etcd_operator_core::lifecycle::Alarm;

use crate::member_client::{
    Compact, Defragment, DisarmAlarm, MemberClient, MoveLeader, PromoteMember, RemoveMember, ask,
};
use crate::ports::EtcdError;

use super::env::{ActionEnv, Done, Failure};

/// A membership call through the MemberClient; `context` names it in the error.
pub(super) async fn call<M, T>(env: &ActionEnv<'_>, call: M, context: String) -> Result<T, Failure>
where
    M: actix::Message<Result = Result<T, EtcdError>> + Send + 'static,
    T: Send + 'static,
    MemberClient: actix::Handler<M>,
{
    ask(env.members, call)
        .await
        .map_err(|e| Failure::etcd(context, &e))
}

/// `member promote` of learner `name`.
pub(super) async fn promote(env: &ActionEnv<'_>, id: u64, name: &str) -> Result<Done, Failure> {
    let promote = PromoteMember {
        endpoints: env.endpoints.clone(),
        id,
    };
    call(env, promote, format!("member promote {name}")).await?;
    let note = format!("promoted learner {name} to a voting member");
    Ok(Done::member(note, name))
}

/// `move-leader` from member `from` (asked at its own client URL) to voter `to`, `name`.
pub(super) async fn move_leader(
    env: &ActionEnv<'_>,
    from: &str,
    to: u64,
    name: &str,
) -> Result<Done, Failure> {
    let move_leader = MoveLeader {
        leader: env.topology.client_url(from, env.tls),
        to,
    };
    call(env, move_leader, format!("move leader {from} -> {name}")).await?;
    let note = format!("member {name} is the leader now (was {from})");
    Ok(Done::member(note, name))
}

/// `alarm disarm` of `alarm`.
pub(super) async fn disarm_alarm(env: &ActionEnv<'_>, alarm: Alarm) -> Result<Done, Failure> {
    let disarm = DisarmAlarm {
        endpoints: env.endpoints.clone(),
        alarm,
    };
    let kind = alarm.kind.as_str();
    call(env, disarm, format!("alarm disarm {kind}")).await?;
    let note = format!(
        "disarmed {kind} (raised for member {:x}): the cluster takes writes again",
        alarm.member
    );
    Ok(Done::cluster(note))
}

/// `compact` of the cluster's history to `revision`.
pub(super) async fn compact(env: &ActionEnv<'_>, revision: i64) -> Result<Done, Failure> {
    let compact = Compact {
        endpoints: env.endpoints.clone(),
        revision,
    };
    call(env, compact, format!("compact {revision}")).await?;
    let note = format!("compacted the history to revision {revision}");
    Ok(Done::cluster(note))
}

/// `defrag` of member `name`, whose backend had `db_size` bytes when it was picked.
pub(super) async fn defragment(
    env: &ActionEnv<'_>,
    name: &str,
    db_size: u64,
) -> Result<Done, Failure> {
    let defragment = Defragment {
        endpoint: env.topology.client_url(name, env.tls),
    };
    let started = tokio::time::Instant::now();
    let done = call(env, defragment, format!("defrag {name}")).await?;
    let took = started.elapsed().as_secs_f64();
    let before = done.before.unwrap_or(db_size);
    let note = match done.after {
        Some(after) => format!(
            "defragmented member {name} in {took:.1} s: its backend went from {before} to \
             {after} bytes (freed {})",
            before.saturating_sub(after)
        ),
        None => format!("defragmented member {name} in {took:.1} s"),
    };
    Ok(Done::member(note, name))
}

/// `member remove` of member `name`.
pub(super) async fn remove(env: &ActionEnv<'_>, id: u64, name: &str) -> Result<Done, Failure> {
    let remove = RemoveMember {
        endpoints: env.endpoints.clone(),
        id,
    };
    call(env, remove, format!("member remove {name}")).await?;
    let note = format!("removed member {name} (id {id:x}) from etcd");
    Ok(Done::member(note, name))
}
