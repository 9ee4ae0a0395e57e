//! The signal that the user interrupted the run.

/// A signal that the run was interrupted, cheap to clone and to poll.
#[derive(Clone, Debug)]
pub struct Cancel(tokio::sync::watch::Receiver<bool>);

impl Cancel {
    /// A sender and the signal it controls.
    pub fn pair() -> (tokio::sync::watch::Sender<bool>, Cancel) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (tx, Cancel(rx))
    }

    /// A signal that never fires (planning, tests).
    pub fn never() -> Cancel {
        let (tx, rx) = tokio::sync::watch::channel(false);
        // Keep the channel open for the life of the program, so it never reads as closed.
        std::mem::forget(tx);
        Cancel(rx)
    }

    /// Whether the run was interrupted.
    pub fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the run is interrupted (never, if it is not).
    pub async fn cancelled(&self) {
        let mut rx = self.0.clone();
        loop {
            if *rx.borrow_and_update() {
                return;
            }
            if rx.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cancel_fires_once_sent() {
        let (tx, cancel) = Cancel::pair();
        assert!(!cancel.is_cancelled());
        let waiter = tokio::spawn({
            let c = cancel.clone();
            async move { c.cancelled().await }
        });
        tx.send(true).unwrap();
        waiter.await.unwrap();
        assert!(cancel.is_cancelled());
        assert!(!Cancel::never().is_cancelled());
    }
}
