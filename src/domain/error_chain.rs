//! An error printed with its causes, for messages that cross a layer as text: a driver's or an
//! HTTP client's top-level message often leaves out why (reqwest's "error sending request",
//! tokio-postgres's "db error"), and the reason is one `source()` down.

use std::error::Error;

/// `e`, then each cause after ": ", skipping a cause whose text the message already holds (many
/// errors repeat their source in their own Display).
pub fn with_causes(e: &dyn Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Layer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|l| l as &(dyn Error + 'static))
        }
    }

    #[test]
    fn every_cause_is_named_once_in_order() {
        let root = Layer("connection refused", None);
        let mid = Layer("tcp connect error", Some(Box::new(root)));
        let top = Layer("error sending request", Some(Box::new(mid)));
        assert_eq!(
            with_causes(&top),
            "error sending request: tcp connect error: connection refused"
        );
    }

    #[test]
    fn a_cause_the_message_already_holds_is_not_repeated() {
        let root = Layer("permission denied", None);
        let top = Layer("opening x: permission denied", Some(Box::new(root)));
        assert_eq!(with_causes(&top), "opening x: permission denied");
        assert_eq!(with_causes(&Layer("alone", None)), "alone");
    }
}
