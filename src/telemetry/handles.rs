//! Metric handles kept per worker thread. The `metrics` macros build an owned
//! key (every label value copied) and look it up in the recorder's registry on
//! every call; the request path records about a dozen series per request, so
//! each thread keeps the handles it has used, found by a hash of the metric
//! and its labels and confirmed by comparing the labels themselves.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use metrics::{Counter, Gauge, Histogram};

use super::metrics::Metric;

/// Label sets are bounded (see `metrics.rs`); this only stops a slow leak if they were not.
const MAX_HANDLES: usize = 4_096;

#[derive(Clone)]
pub enum Handle {
    Counter(Counter),
    Gauge(Gauge),
    Histogram(Histogram),
}

struct Entry {
    metric: Metric,
    labels: Vec<(&'static str, String)>,
    handle: Handle,
}

thread_local! {
    static HANDLES: RefCell<HashMap<u64, Entry>> = RefCell::new(HashMap::new());
}

/// The handle of `metric` with `pairs`: from this thread's cache, or made by
/// `make` and kept. `make` must return the same kind of handle every time.
pub fn cached(
    metric: Metric,
    pairs: &[(&'static str, &str)],
    make: impl FnOnce() -> Handle,
) -> Handle {
    let mut hasher = DefaultHasher::new();
    metric.as_str().hash(&mut hasher);
    pairs.hash(&mut hasher);
    let key = hasher.finish();
    HANDLES.with(|handles| {
        let mut handles = handles.borrow_mut();
        if let Some(entry) = handles.get(&key) {
            if entry.metric == metric && same_labels(&entry.labels, pairs) {
                return entry.handle.clone();
            }
            // Two series with one hash: the later one is simply not cached.
            return make();
        }
        if handles.len() >= MAX_HANDLES {
            handles.clear();
        }
        let handle = make();
        handles.insert(
            key,
            Entry {
                metric,
                labels: pairs.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
                handle: handle.clone(),
            },
        );
        handle
    })
}

fn same_labels(kept: &[(&'static str, String)], pairs: &[(&'static str, &str)]) -> bool {
    kept.len() == pairs.len()
        && kept
            .iter()
            .zip(pairs)
            .all(|((k1, v1), (k2, v2))| k1 == k2 && v1 == v2)
}
