//! Puts a host on a pull source's batches: a relay daemon's live session is another
//! host's kernel, and the router makes another host's processes targets of their own
//! (`NAME@HOST`) rather than mixing their threads with this host's.

use super::{BatchReader, SourceError};
use crate::model::EventBatch;

/// `inner`'s batches, each on `host` unless it names one already.
pub struct OnHost {
    inner: Box<dyn BatchReader>,
    host: String,
}

impl OnHost {
    pub fn new(inner: Box<dyn BatchReader>, host: impl Into<String>) -> Self {
        Self {
            inner,
            host: host.into(),
        }
    }
}

impl BatchReader for OnHost {
    fn next_batch(&mut self) -> Result<Option<EventBatch>, SourceError> {
        let mut batch = self.inner.next_batch()?;
        if let Some(b) = batch.as_mut() {
            b.process.host.get_or_insert_with(|| self.host.clone());
        }
        Ok(batch)
    }

    fn bytes_read(&self) -> u64 {
        self.inner.bytes_read()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ProcessInfo;

    struct Batches(Vec<EventBatch>);

    impl BatchReader for Batches {
        fn next_batch(&mut self) -> Result<Option<EventBatch>, SourceError> {
            Ok(self.0.pop())
        }
        fn bytes_read(&self) -> u64 {
            7
        }
    }

    fn on(host: Option<&str>) -> EventBatch {
        EventBatch {
            source: "lttng",
            process: ProcessInfo {
                comm: Some("mariadbd".into()),
                host: host.map(str::to_owned),
                ..ProcessInfo::default()
            },
            events: Vec::new(),
        }
    }

    #[test]
    fn batches_without_a_host_get_this_one_and_others_keep_theirs() {
        let inner = Batches(vec![on(Some("db-3")), on(None)]);
        let mut r = OnHost::new(Box::new(inner), "db-2");
        let host = |b: Option<EventBatch>| b.and_then(|b| b.process.host);
        assert_eq!(host(r.next_batch().ok().flatten()).as_deref(), Some("db-2"));
        assert_eq!(host(r.next_batch().ok().flatten()).as_deref(), Some("db-3"));
        assert!(matches!(r.next_batch(), Ok(None)));
        assert_eq!(r.bytes_read(), 7);
    }
}
