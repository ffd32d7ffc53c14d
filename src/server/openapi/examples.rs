//! The request examples of the document. The ops tests validate each against its schema and
//! send it to the daemon, which must accept it.

use serde_json::{json, Value};

/// A group with tool calls, judged plus an exact-answer verifier.
pub fn verified() -> Value {
    json!({
        "trajectories": [
            {
                "messages": [
                    {
                        "role": "system",
                        "content": "You answer arithmetic questions. End with ANSWER: <n>."
                    },
                    {
                        "role": "user",
                        "content": "What is 1030 * 4?"
                    },
                    {
                        "role": "assistant",
                        "content": null,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {
                                    "name": "calculator",
                                    "arguments": "{\"expression\": \"1030*4\"}"
                                }
                            }
                        ]
                    },
                    {
                        "role": "tool",
                        "tool_call_id": "call_1",
                        "content": "4120"
                    },
                    {
                        "role": "assistant",
                        "content": "1030 * 4 = 4120.\nANSWER: 4120"
                    }
                ]
            },
            {
                "messages": [
                    {
                        "role": "system",
                        "content": "You answer arithmetic questions. End with ANSWER: <n>."
                    },
                    {
                        "role": "user",
                        "content": "What is 1030 * 4?"
                    },
                    {
                        "role": "assistant",
                        "content": null,
                        "tool_calls": [
                            {
                                "id": "call_1",
                                "type": "function",
                                "function": {
                                    "name": "calculator",
                                    "arguments": "{\"expression\": \"1030*4\"}"
                                }
                            }
                        ]
                    },
                    {
                        "role": "tool",
                        "tool_call_id": "call_1",
                        "content": "4120"
                    },
                    {
                        "role": "assistant",
                        "content": "About 4000.\nANSWER: 4000"
                    }
                ]
            }
        ],
        "rubric": "default",
        "permutations": 1,
        "verifiers": [
            {
                "type": "answer_line",
                "kind": "integer",
                "expected": 4120
            }
        ],
        "policy": {
            "type": "correctness_plus_shaping",
            "correctness": "answer_line",
            "shaping": {
                "judge": 0.1
            }
        },
        "scale_rewards": "group",
        "on_judge_error": "fail"
    })
}

/// Just the trajectories.
pub fn minimal() -> Value {
    json!({
        "trajectories": [
            {
                "messages": [
                    {
                        "role": "user",
                        "content": "Name a prime above 10."
                    },
                    {
                        "role": "assistant",
                        "content": "11"
                    }
                ]
            },
            {
                "messages": [
                    {
                        "role": "user",
                        "content": "Name a prime above 10."
                    },
                    {
                        "role": "assistant",
                        "content": "12"
                    }
                ]
            }
        ]
    })
}

/// Two groups, advantages scaled over the batch.
pub fn batch() -> Value {
    json!({
        "groups": [
            {
                "trajectories": [
                    {
                        "messages": [
                            {
                                "role": "user",
                                "content": "Name a prime above 10."
                            },
                            {
                                "role": "assistant",
                                "content": "11"
                            }
                        ]
                    },
                    {
                        "messages": [
                            {
                                "role": "user",
                                "content": "Name a prime above 10."
                            },
                            {
                                "role": "assistant",
                                "content": "12"
                            }
                        ]
                    }
                ]
            },
            {
                "trajectories": [
                    {
                        "messages": [
                            {
                                "role": "system",
                                "content": "You answer arithmetic questions. End with ANSWER: <n>."
                            },
                            {
                                "role": "user",
                                "content": "What is 1030 * 4?"
                            },
                            {
                                "role": "assistant",
                                "content": null,
                                "tool_calls": [
                                    {
                                        "id": "call_1",
                                        "type": "function",
                                        "function": {
                                            "name": "calculator",
                                            "arguments": "{\"expression\": \"1030*4\"}"
                                        }
                                    }
                                ]
                            },
                            {
                                "role": "tool",
                                "tool_call_id": "call_1",
                                "content": "4120"
                            },
                            {
                                "role": "assistant",
                                "content": "1030 * 4 = 4120.\nANSWER: 4120"
                            }
                        ]
                    },
                    {
                        "messages": [
                            {
                                "role": "system",
                                "content": "You answer arithmetic questions. End with ANSWER: <n>."
                            },
                            {
                                "role": "user",
                                "content": "What is 1030 * 4?"
                            },
                            {
                                "role": "assistant",
                                "content": null,
                                "tool_calls": [
                                    {
                                        "id": "call_1",
                                        "type": "function",
                                        "function": {
                                            "name": "calculator",
                                            "arguments": "{\"expression\": \"1030*4\"}"
                                        }
                                    }
                                ]
                            },
                            {
                                "role": "tool",
                                "tool_call_id": "call_1",
                                "content": "4120"
                            },
                            {
                                "role": "assistant",
                                "content": "About 4000.\nANSWER: 4000"
                            }
                        ]
                    }
                ],
                "rubric": {
                    "text": "The exact answer matters most; then fewer tool calls."
                }
            }
        ],
        "scale_rewards": "batch"
    })
}

/// Eight samples of one prompt (a full group).
pub fn one_group() -> Value {
    json!({
        "query": [
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\n6 * 7 = 42.\nANSWER: 42",
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\nANSWER: 42",
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\n6 * 7 is 48.\nANSWER: 48",
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\nLet me think: 6 * 7 = 42.\nANSWER: 42",
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\nANSWER: 36",
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\n6 sevens make 42.\nANSWER: 42",
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\nANSWER: 13",
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\nI am not sure.\nANSWER: 40"
        ],
        "prompts": [
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\n",
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\n",
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\n",
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\n",
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\n",
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\n",
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\n",
            "<|im_start|>user\nWhat is 6 * 7? End with ANSWER: <n>.<|im_end|>\n<|im_start|>assistant\n"
        ],
        "labels": [
            "42",
            "42",
            "42",
            "42",
            "42",
            "42",
            "42",
            "42"
        ]
    })
}
