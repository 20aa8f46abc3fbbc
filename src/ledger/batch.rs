//! Batch: events waiting for the database, flushed when full or old enough.

#[derive(Debug)]
pub struct Batch<T> {
    events: Vec<T>,
    max_rows: usize,
    oldest_at_ms: Option<u64>,
}

impl<T> Batch<T> {
    pub fn new(max_rows: usize) -> Batch<T> {
        Batch {
            events: Vec::with_capacity(max_rows),
            max_rows: max_rows.max(1),
            oldest_at_ms: None,
        }
    }

    pub fn push(&mut self, event: T, now_ms: u64) {
        self.oldest_at_ms.get_or_insert(now_ms);
        self.events.push(event);
    }

    pub fn is_full(&self) -> bool {
        self.events.len() >= self.max_rows
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn age_ms(&self, now_ms: u64) -> u64 {
        self.oldest_at_ms.map_or(0, |at| now_ms.saturating_sub(at))
    }

    /// Up to `max_rows` of the oldest events; the rest stay for the next flush.
    pub fn take(&mut self) -> Vec<T> {
        let n = self.events.len().min(self.max_rows);
        let rest = self.events.split_off(n);
        let taken = std::mem::replace(&mut self.events, rest);
        if self.events.is_empty() {
            self.oldest_at_ms = None;
        }
        taken
    }

    /// Puts a batch the database refused back in front, keeping order.
    pub fn restore(&mut self, mut events: Vec<T>, now_ms: u64) {
        if events.is_empty() {
            return;
        }
        events.append(&mut self.events);
        self.events = events;
        self.oldest_at_ms = Some(self.oldest_at_ms.map_or(now_ms, |at| at.min(now_ms)));
    }
}
