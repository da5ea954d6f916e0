//! The MemberClient actor: one per cluster, it serializes every etcd membership call.
//!
//! Its mailbox is the serialization: each handler returns an [`AtomicResponse`], so the
//! actor takes no other message until the current call has finished. It sets no deadline of
//! its own: every [`EtcdApi`] call ends within the port's deadline (see the trait), and a
//! timed-out call comes back like any other failure, as an [`EtcdError`] value.

use std::future::Future;
use std::sync::Arc;

use actix::prelude::*;

use crate::ports::{
    AddedMember, Defragmented, EtcdApi, EtcdError, EtcdErrorKind, MemberList, NewMember,
};
use etcd_operator_core::lifecycle::{Alarm, MemberHealth};

/// Serializes membership calls of one cluster through an [`EtcdApi`].
pub struct MemberClient {
    api: Arc<dyn EtcdApi>,
}

impl MemberClient {
    /// A client whose calls go through `api`, one at a time.
    pub fn new(api: Arc<dyn EtcdApi>) -> Self {
        MemberClient { api }
    }

    fn serialized<T: 'static>(
        &self,
        call: impl Future<Output = Result<T, EtcdError>> + 'static,
    ) -> AtomicResponse<Self, Result<T, EtcdError>> {
        AtomicResponse::new(Box::pin(call.into_actor(self)))
    }
}

impl Actor for MemberClient {
    type Context = Context<Self>;
}

/// `member list` through any of `endpoints`.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<MemberList, EtcdError>")]
pub struct ListMembers {
    /// Client URLs to try.
    pub endpoints: Vec<String>,
}

/// `member add`.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<AddedMember, EtcdError>")]
pub struct AddMember {
    /// Client URLs to try.
    pub endpoints: Vec<String>,
    /// The member to add.
    pub member: NewMember,
}

/// `member remove`.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<(), EtcdError>")]
pub struct RemoveMember {
    /// Client URLs to try.
    pub endpoints: Vec<String>,
    /// Member ID.
    pub id: u64,
}

/// `member promote`.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<(), EtcdError>")]
pub struct PromoteMember {
    /// Client URLs to try.
    pub endpoints: Vec<String>,
    /// Member ID.
    pub id: u64,
}

/// `move-leader`.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<(), EtcdError>")]
pub struct MoveLeader {
    /// The leader's client URL (only the leader may hand leadership over).
    pub leader: String,
    /// The member ID of the new leader.
    pub to: u64,
}

/// `alarm disarm` of one alarm.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<(), EtcdError>")]
pub struct DisarmAlarm {
    /// Client URLs to try.
    pub endpoints: Vec<String>,
    /// The alarm.
    pub alarm: Alarm,
}

/// `compact` of the cluster's history.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<(), EtcdError>")]
pub struct Compact {
    /// Client URLs to try.
    pub endpoints: Vec<String>,
    /// The revision to compact to.
    pub revision: i64,
}

/// `defrag` of one member.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<Defragmented, EtcdError>")]
pub struct Defragment {
    /// The member's client URL.
    pub endpoint: String,
}

/// `endpoint status` of one member.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<MemberHealth, EtcdError>")]
pub struct ProbeMember {
    /// The member's client URL.
    pub endpoint: String,
}

impl Handler<ListMembers> for MemberClient {
    type Result = AtomicResponse<Self, Result<MemberList, EtcdError>>;

    fn handle(&mut self, msg: ListMembers, _: &mut Context<Self>) -> Self::Result {
        let api = self.api.clone();
        self.serialized(async move { api.list(&msg.endpoints).await })
    }
}

impl Handler<AddMember> for MemberClient {
    type Result = AtomicResponse<Self, Result<AddedMember, EtcdError>>;

    fn handle(&mut self, msg: AddMember, _: &mut Context<Self>) -> Self::Result {
        let api = self.api.clone();
        self.serialized(async move { api.add(&msg.endpoints, &msg.member).await })
    }
}

impl Handler<RemoveMember> for MemberClient {
    type Result = AtomicResponse<Self, Result<(), EtcdError>>;

    fn handle(&mut self, msg: RemoveMember, _: &mut Context<Self>) -> Self::Result {
        let api = self.api.clone();
        self.serialized(async move { api.remove(&msg.endpoints, msg.id).await })
    }
}

impl Handler<PromoteMember> for MemberClient {
    type Result = AtomicResponse<Self, Result<(), EtcdError>>;

    fn handle(&mut self, msg: PromoteMember, _: &mut Context<Self>) -> Self::Result {
        let api = self.api.clone();
        self.serialized(async move { api.promote(&msg.endpoints, msg.id).await })
    }
}

impl Handler<MoveLeader> for MemberClient {
    type Result = AtomicResponse<Self, Result<(), EtcdError>>;

    fn handle(&mut self, msg: MoveLeader, _: &mut Context<Self>) -> Self::Result {
        let api = self.api.clone();
        self.serialized(async move { api.move_leader(&msg.leader, msg.to).await })
    }
}

impl Handler<DisarmAlarm> for MemberClient {
    type Result = AtomicResponse<Self, Result<(), EtcdError>>;

    fn handle(&mut self, msg: DisarmAlarm, _: &mut Context<Self>) -> Self::Result {
        let api = self.api.clone();
        self.serialized(async move { api.disarm_alarm(&msg.endpoints, msg.alarm).await })
    }
}

impl Handler<Compact> for MemberClient {
    type Result = AtomicResponse<Self, Result<(), EtcdError>>;

    fn handle(&mut self, msg: Compact, _: &mut Context<Self>) -> Self::Result {
        let api = self.api.clone();
        self.serialized(async move { api.compact(&msg.endpoints, msg.revision).await })
    }
}

impl Handler<Defragment> for MemberClient {
    type Result = AtomicResponse<Self, Result<Defragmented, EtcdError>>;

    fn handle(&mut self, msg: Defragment, _: &mut Context<Self>) -> Self::Result {
        let api = self.api.clone();
        self.serialized(async move { api.defragment(&msg.endpoint).await })
    }
}

impl Handler<ProbeMember> for MemberClient {
    type Result = AtomicResponse<Self, Result<MemberHealth, EtcdError>>;

    fn handle(&mut self, msg: ProbeMember, _: &mut Context<Self>) -> Self::Result {
        let api = self.api.clone();
        self.serialized(async move { api.status(&msg.endpoint).await })
    }
}

/// Sends a call to a MemberClient; a stopped MemberClient is an unavailable etcd.
pub(crate) async fn ask<M, T>(client: &Addr<MemberClient>, msg: M) -> Result<T, EtcdError>
where
    M: Message<Result = Result<T, EtcdError>> + Send + 'static,
    T: Send + 'static,
    MemberClient: Handler<M>,
{
    client.send(msg).await.unwrap_or_else(|e| {
        Err(EtcdError::new(
            EtcdErrorKind::Unavailable,
            format!("member client unavailable: {e}"),
        ))
    })
}
