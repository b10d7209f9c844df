//! Why a sequence ended: one `FinishReason` shared by the serial path
//! (`runtime`) and the server's engine loop, with vLLM's vocabulary
//! (`stop`, `length`, `abort`, `error`) and vLLM's `stop_reason` (the stop
//! string that matched, or the token ID that ended it).

use serde::{Serialize, Serializer};

/// What ended a `stop` finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// An end-of-sequence token or one of `stop_token_ids` was generated.
    Token(u32),
    /// A stop string appeared in the output text (it is cut from the text).
    String(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    Stop(StopReason),
    /// `max_tokens` was reached.
    Length,
    /// The client went away or the server shut down.
    Abort,
    /// The server failed (e.g. a forward pass error).
    Error,
}

impl FinishReason {
    /// The OpenAI / vLLM `finish_reason` string (also the metrics label).
    pub fn as_str(&self) -> &'static str {
        match self {
            FinishReason::Stop(_) => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
            FinishReason::Error => "error",
        }
    }

    /// vLLM's `stop_reason`: the matched stop string, or the stop token ID;
    /// JSON null for every other finish.
    pub fn stop_reason(&self) -> serde_json::Value {
        match self {
            FinishReason::Stop(StopReason::Token(t)) => serde_json::Value::from(*t),
            FinishReason::Stop(StopReason::String(s)) => serde_json::Value::from(s.as_str()),
            _ => serde_json::Value::Null,
        }
    }
}

impl Serialize for FinishReason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_stop_reasons_follow_vllm() {
        let by_token = FinishReason::Stop(StopReason::Token(7));
        let by_string = FinishReason::Stop(StopReason::String("wizard".into()));
        assert_eq!(serde_json::to_value(&by_token).unwrap(), "stop");
        assert_eq!(by_token.stop_reason(), serde_json::json!(7));
        assert_eq!(by_string.stop_reason(), serde_json::json!("wizard"));
        assert_eq!(FinishReason::Length.stop_reason(), serde_json::Value::Null);
        assert_eq!(FinishReason::Error.as_str(), "error");
    }
}
