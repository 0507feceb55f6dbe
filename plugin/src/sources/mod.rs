//! Sources: everything that turns outside input into [`crate::model::EventBatch`]es.
