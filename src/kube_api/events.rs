//! The Kubernetes Event the operator records on one of its objects.

use kube::runtime::events::{Event, EventType};

/// Longest note an Event carries; a longer one is cut (the API server refuses more).
const NOTE_LIMIT: usize = 1000;

/// An Event of `reason` with `note` (cut to its limit) for the operator's `action`, a
/// Warning when `warning`, with no secondary object.
pub(crate) fn event(warning: bool, reason: &str, note: &str, action: &str) -> Event {
    let mut note = note.to_string();
    note.truncate(NOTE_LIMIT);
    Event {
        type_: if warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: reason.to_string(),
        note: Some(note),
        action: action.to_string(),
        secondary: None,
    }
}
