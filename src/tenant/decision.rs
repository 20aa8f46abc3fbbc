//! The reply of a quota decision: made on the spot from the in-memory book,
//! or a future through the shared store during which the actor handles no
//! other message of its tenant (one decision at a time per replica, as with
//! the book; Redis makes them atomic across replicas).

use std::pin::Pin;

use actix::dev::{MessageResponse, OneshotSender};
use actix::{Actor, ActorFuture, ActorFutureExt, AsyncContext, Message};

pub enum Decision<A: Actor, T> {
    Now(T),
    Wait(Pin<Box<dyn ActorFuture<A, Output = T>>>),
}

impl<A: Actor, T> Decision<A, T> {
    pub fn wait(future: impl ActorFuture<A, Output = T> + 'static) -> Self {
        Decision::Wait(Box::pin(future))
    }
}

impl<A, M> MessageResponse<A, M> for Decision<A, M::Result>
where
    A: Actor,
    A::Context: AsyncContext<A>,
    M: Message,
    M::Result: 'static,
{
    fn handle(self, ctx: &mut A::Context, tx: Option<OneshotSender<M::Result>>) {
        match self {
            Decision::Now(result) => {
                if let Some(tx) = tx {
                    let _ = tx.send(result);
                }
            }
            Decision::Wait(future) => {
                ctx.wait(future.map(move |result, _, _| {
                    if let Some(tx) = tx {
                        let _ = tx.send(result);
                    }
                }));
            }
        }
    }
}
