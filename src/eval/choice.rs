//! What an evaluation asks for besides its judges and rubrics: the mode a judge is asked in,
//! and the score ranked against the labels. Each prints and serialises as the report always
//! wrote it (`as configured`, `pointwise`; `reward`, `judge`).

use std::fmt;

use serde::{Serialize, Serializer};

use crate::domain::prompt::JudgeMode;

/// The mode a combination's judge is asked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModeAsked {
    /// No mode was asked for and the judge is not configured here: its own, whatever it is.
    AsConfigured,
    Mode(JudgeMode),
}

impl ModeAsked {
    pub fn as_str(self) -> &'static str {
        match self {
            ModeAsked::AsConfigured => "as configured",
            ModeAsked::Mode(m) => m.name(),
        }
    }
}

impl fmt::Display for ModeAsked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ModeAsked {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What is ranked against the labels: the reward (what training gets), or one component of it
/// by name (`judge`, a verifier's name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScoreTarget {
    Reward,
    Component(String),
}

impl ScoreTarget {
    /// `--score`'s parser: `reward`, or any other name as a component.
    pub fn parse(s: &str) -> Result<ScoreTarget, String> {
        match s {
            "" => Err("a score is `reward` or a component's name".into()),
            "reward" => Ok(ScoreTarget::Reward),
            name => Ok(ScoreTarget::Component(name.to_string())),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            ScoreTarget::Reward => "reward",
            ScoreTarget::Component(name) => name,
        }
    }
}

impl fmt::Display for ScoreTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ScoreTarget {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_write_what_the_report_always_wrote() {
        let json = |v: serde_json::Value| v.to_string();
        let mode = |m: ModeAsked| json(serde_json::to_value(m).unwrap());
        assert_eq!(mode(ModeAsked::AsConfigured), "\"as configured\"");
        assert_eq!(mode(ModeAsked::Mode(JudgeMode::Pairwise)), "\"pairwise\"");
        assert_eq!(ScoreTarget::parse("reward"), Ok(ScoreTarget::Reward));
        let judge = ScoreTarget::parse("judge").unwrap();
        assert_eq!(judge, ScoreTarget::Component("judge".into()));
        let target = |t: &ScoreTarget| json(serde_json::to_value(t).unwrap());
        assert_eq!(target(&judge), "\"judge\"");
        assert_eq!(target(&ScoreTarget::Reward), "\"reward\"");
        assert!(ScoreTarget::parse("").is_err());
    }
}
