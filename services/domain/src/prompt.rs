//! A turn's prompt: text, images (size-bounded, their type checked against their
//! bytes), resource links passed through as ACP documents them, and the kinds the
//! agent does not advertise refused with a typed reason — Cursor advertises images
//! only (no audio, no embedded context).

use base64::Engine as _;
use cursor_runner_acp::schema;
use serde_json::Value;

use crate::error::{EngineError, Reason};

/// Most blocks in one prompt.
pub const MAX_PROMPT_BLOCKS: usize = 64;
/// Characters of text across a prompt.
pub const MAX_PROMPT_TEXT_CHARS: usize = 1_000_000;
/// Bytes of one image (before base64). gRPC's default 4 MiB message bound is the outer
/// limit; this leaves room for the rest of the request.
pub const MAX_IMAGE_BYTES: usize = 3 * 1024 * 1024;
/// Characters of a resource link's URI, name, title, description or MIME type.
pub const MAX_LINK_FIELD_CHARS: usize = 2048;

/// Whether an image's bytes are of one type.
type IsOfType = fn(&[u8]) -> bool;

/// The image types a prompt may carry, each with the test its bytes must pass: the whole
/// signature, where a shorter prefix is shared by other formats (RIFF also holds WAV and
/// AVI; a GIF names its version).
const IMAGE_SIGNATURES: [(&str, IsOfType); 4] = [
    ("image/png", |data| data.starts_with(b"\x89PNG\r\n\x1a\n")),
    ("image/jpeg", |data| data.starts_with(b"\xff\xd8\xff")),
    ("image/gif", |data| {
        data.starts_with(b"GIF87a") || data.starts_with(b"GIF89a")
    }),
    ("image/webp", |data| {
        data.starts_with(b"RIFF") && data.get(8..12) == Some(b"WEBP")
    }),
];

/// One block of a prompt as the caller sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptBlock {
    Text(String),
    Image {
        data: Vec<u8>,
        mime_type: String,
        uri: Option<String>,
    },
    Audio {
        mime_type: String,
    },
    ResourceLink {
        uri: String,
        name: String,
        title: Option<String>,
        description: Option<String>,
        mime_type: Option<String>,
        size: Option<i64>,
    },
    EmbeddedResource {
        uri: String,
    },
}

/// What the agent said it accepts in prompts (`agentCapabilities.promptCapabilities`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PromptCapabilities {
    pub image: bool,
    pub audio: bool,
    pub embedded_context: bool,
}

impl PromptCapabilities {
    /// From an `initialize` result; anything missing is not advertised.
    pub fn from_initialize(result: &Value) -> Self {
        let caps = &result["agentCapabilities"]["promptCapabilities"];
        Self {
            image: caps["image"] == true,
            audio: caps["audio"] == true,
            embedded_context: caps["embeddedContext"] == true,
        }
    }
}

/// A validated prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    pub blocks: Vec<PromptBlock>,
}

fn invalid(message: impl Into<String>) -> EngineError {
    EngineError::invalid(Reason::PromptInvalid, message)
}

fn bounded(field: &str, text: &str) -> Result<(), EngineError> {
    if text.chars().count() > MAX_LINK_FIELD_CHARS {
        return Err(invalid(format!(
            "a resource link's {field} is over {MAX_LINK_FIELD_CHARS} characters"
        )));
    }
    Ok(())
}

impl Prompt {
    /// Checks the prompt's shape: not empty, within its bounds, every image of the type
    /// it claims to be.
    pub fn new(blocks: Vec<PromptBlock>) -> Result<Self, EngineError> {
        if blocks.len() > MAX_PROMPT_BLOCKS {
            return Err(invalid(format!("at most {MAX_PROMPT_BLOCKS} prompt blocks")));
        }
        let text_chars: usize = blocks
            .iter()
            .map(|b| match b {
                PromptBlock::Text(text) => text.chars().count(),
                _ => 0,
            })
            .sum();
        if text_chars > MAX_PROMPT_TEXT_CHARS {
            return Err(invalid(format!(
                "the prompt's text is over {MAX_PROMPT_TEXT_CHARS} characters"
            )));
        }
        let has_content = blocks.iter().any(|b| match b {
            PromptBlock::Text(text) => !text.trim().is_empty(),
            _ => true,
        });
        if !has_content {
            return Err(EngineError::invalid(
                Reason::InvalidArgument,
                "prompt must not be empty",
            ));
        }
        for block in &blocks {
            match block {
                PromptBlock::Image { data, mime_type, uri } => {
                    if data.len() > MAX_IMAGE_BYTES {
                        return Err(invalid(format!("an image is over {MAX_IMAGE_BYTES} bytes")));
                    }
                    let Some((_, is_of_type)) = IMAGE_SIGNATURES.iter().find(|(mime, _)| mime == mime_type) else {
                        return Err(invalid(format!(
                            "image type `{mime_type}` is not one of {}",
                            IMAGE_SIGNATURES.map(|(m, _)| m).join(", ")
                        )));
                    };
                    if !is_of_type(data) {
                        return Err(invalid(format!("the image's bytes are not {mime_type}")));
                    }
                    if let Some(uri) = uri {
                        bounded("uri", uri)?;
                    }
                }
                PromptBlock::ResourceLink {
                    uri,
                    name,
                    title,
                    description,
                    mime_type,
                    ..
                } => {
                    if uri.is_empty() || name.is_empty() {
                        return Err(invalid("a resource link needs a uri and a name"));
                    }
                    for (field, text) in [("uri", Some(uri)), ("name", Some(name)), ("title", title.as_ref())]
                        .into_iter()
                        .chain([("description", description.as_ref()), ("mime type", mime_type.as_ref())])
                    {
                        if let Some(text) = text {
                            bounded(field, text)?;
                        }
                    }
                }
                PromptBlock::Text(_) | PromptBlock::Audio { .. } | PromptBlock::EmbeddedResource { .. } => {}
            }
        }
        Ok(Self { blocks })
    }

    /// Refuses content the agent did not advertise.
    /// Refuses content the agent did not advertise — and audio and embedded context
    /// always: this runner does not forward them (Cursor advertises neither), and a block
    /// silently dropped would be a lie about what the agent saw.
    pub fn check_supported(&self, capabilities: PromptCapabilities) -> Result<(), EngineError> {
        for block in &self.blocks {
            let (kind, advertised, forwarded) = match block {
                PromptBlock::Image { .. } => ("image", capabilities.image, true),
                PromptBlock::Audio { .. } => ("audio", capabilities.audio, false),
                PromptBlock::EmbeddedResource { .. } => ("embedded_context", capabilities.embedded_context, false),
                PromptBlock::Text(_) | PromptBlock::ResourceLink { .. } => continue,
            };
            let refusal = match (advertised, forwarded) {
                (true, true) => continue,
                (false, _) => format!("the agent does not accept {kind} in prompts"),
                (true, false) => format!("this runner does not forward {kind} in prompts"),
            };
            return Err(EngineError::precondition(Reason::PromptContentUnsupported, refusal).with("content", kind));
        }
        Ok(())
    }

    /// Characters of text (for `turn.started`).
    pub fn text_chars(&self) -> u64 {
        self.blocks
            .iter()
            .map(|b| match b {
                PromptBlock::Text(text) => text.chars().count() as u64,
                _ => 0,
            })
            .sum()
    }

    /// The ACP content blocks (`check_supported` passed, so there are no audio or
    /// embedded ones to leave out).
    pub fn to_acp(&self) -> Vec<schema::ContentBlock> {
        self.blocks
            .iter()
            .filter_map(|block| match block {
                PromptBlock::Text(text) => Some(schema::ContentBlock::Text(schema::TextContent::new(text.clone()))),
                PromptBlock::Image { data, mime_type, uri } => Some(schema::ContentBlock::Image(
                    schema::ImageContent::new(
                        base64::engine::general_purpose::STANDARD.encode(data),
                        mime_type.clone(),
                    )
                    .uri(uri.clone()),
                )),
                PromptBlock::ResourceLink {
                    uri,
                    name,
                    title,
                    description,
                    mime_type,
                    size,
                } => Some(schema::ContentBlock::ResourceLink(
                    schema::ResourceLink::new(name.clone(), uri.clone())
                        .title(title.clone())
                        .description(description.clone())
                        .mime_type(mime_type.clone())
                        .size(*size),
                )),
                PromptBlock::Audio { .. } | PromptBlock::EmbeddedResource { .. } => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PNG: &[u8] = b"\x89PNG\r\n\x1a\nrest-of-image";

    fn image(data: &[u8], mime: &str) -> PromptBlock {
        PromptBlock::Image {
            data: data.to_vec(),
            mime_type: mime.into(),
            uri: None,
        }
    }

    fn reason(result: Result<Prompt, EngineError>) -> Reason {
        result.unwrap_err().reason
    }

    #[test]
    fn an_image_must_be_the_type_it_claims() {
        assert!(Prompt::new(vec![image(PNG, "image/png")]).is_ok());
        assert_eq!(
            reason(Prompt::new(vec![image(PNG, "image/jpeg")])),
            Reason::PromptInvalid
        );
        assert_eq!(
            reason(Prompt::new(vec![image(PNG, "image/svg+xml")])),
            Reason::PromptInvalid
        );
    }

    /// A container's magic alone does not make the type: RIFF holds WAV and AVI as well as
    /// WebP, and a GIF names its version.
    #[test]
    fn an_image_is_recognised_by_its_whole_signature_not_a_prefix_other_formats_share() {
        let cases: &[(&[u8], &str, bool)] = &[
            (b"RIFF\x24\0\0\0WEBPVP8 ", "image/webp", true),
            (b"RIFF\x24\0\0\0WAVEfmt ", "image/webp", false),
            (b"RIFF\x24\0\0\0AVI LIST", "image/webp", false),
            (b"RIFF", "image/webp", false),
            (b"GIF87a\x01\0", "image/gif", true),
            (b"GIF89a\x01\0", "image/gif", true),
            (b"GIF8zzzz", "image/gif", false),
            (b"\xff\xd8\xff\xe0", "image/jpeg", true),
            (b"\xff\xd8", "image/jpeg", false),
        ];
        for (data, mime, accepted) in cases {
            let got = Prompt::new(vec![image(data, mime)]);
            assert_eq!(got.is_ok(), *accepted, "{mime} {data:?}: {got:?}");
        }
    }

    #[test]
    fn an_image_exactly_at_the_bound_passes_and_one_byte_more_is_refused() {
        let mut at_bound = PNG.to_vec();
        at_bound.resize(MAX_IMAGE_BYTES, 0);
        assert!(Prompt::new(vec![image(&at_bound, "image/png")]).is_ok());
        at_bound.push(0);
        assert_eq!(
            reason(Prompt::new(vec![image(&at_bound, "image/png")])),
            Reason::PromptInvalid
        );
    }

    #[test]
    fn text_and_block_counts_are_bounded_at_their_edges() {
        let at_bound = "x".repeat(MAX_PROMPT_TEXT_CHARS);
        assert!(Prompt::new(vec![PromptBlock::Text(at_bound.clone())]).is_ok());
        let over = vec![PromptBlock::Text(at_bound), PromptBlock::Text("y".into())];
        assert_eq!(reason(Prompt::new(over)), Reason::PromptInvalid);
        let most = vec![PromptBlock::Text("a".into()); MAX_PROMPT_BLOCKS];
        assert!(Prompt::new(most.clone()).is_ok());
        let too_many = [most, vec![PromptBlock::Text("a".into())]].concat();
        assert_eq!(reason(Prompt::new(too_many)), Reason::PromptInvalid);
    }

    #[test]
    fn an_empty_prompt_is_refused() {
        assert_eq!(reason(Prompt::new(vec![])), Reason::InvalidArgument);
        assert_eq!(
            reason(Prompt::new(vec![PromptBlock::Text("  ".into())])),
            Reason::InvalidArgument
        );
    }

    #[test]
    fn unadvertised_content_is_refused_by_kind() {
        let cursor = PromptCapabilities {
            image: true,
            audio: false,
            embedded_context: false,
        };
        let with = |block: PromptBlock| Prompt::new(vec![PromptBlock::Text("look".into()), block]).unwrap();
        assert!(with(image(PNG, "image/png")).check_supported(cursor).is_ok());
        for (block, kind) in [
            (
                PromptBlock::Audio {
                    mime_type: "audio/wav".into(),
                },
                "audio",
            ),
            (
                PromptBlock::EmbeddedResource {
                    uri: "file:///a".into(),
                },
                "embedded_context",
            ),
        ] {
            let refused = with(block.clone()).check_supported(cursor).unwrap_err();
            assert_eq!(refused.reason, Reason::PromptContentUnsupported);
            assert!(refused.metadata.contains(&("content".into(), kind.into())));
            // Advertised or not: this runner does not forward them, so it never pretends to.
            let everything = PromptCapabilities {
                image: true,
                audio: true,
                embedded_context: true,
            };
            let refused = with(block).check_supported(everything).unwrap_err();
            assert!(refused.message.contains("does not forward"), "{}", refused.message);
        }
        let no_images = PromptCapabilities::default();
        assert!(with(image(PNG, "image/png")).check_supported(no_images).is_err());
    }

    #[test]
    fn blocks_become_acp_content_with_base64_images() {
        let prompt = Prompt::new(vec![
            PromptBlock::Text("see".into()),
            image(PNG, "image/png"),
            PromptBlock::ResourceLink {
                uri: "file:///w/src/main.rs".into(),
                name: "main.rs".into(),
                title: None,
                description: None,
                mime_type: Some("text/x-rust".into()),
                size: Some(12),
            },
        ])
        .unwrap();
        let wire = serde_json::to_value(prompt.to_acp()).unwrap();
        assert_eq!(wire[0]["type"], "text");
        assert_eq!(wire[1]["type"], "image");
        assert_eq!(wire[1]["mimeType"], "image/png");
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(wire[1]["data"].as_str().unwrap())
                .unwrap(),
            PNG
        );
        assert_eq!(wire[2]["type"], "resource_link");
        assert_eq!(wire[2]["uri"], "file:///w/src/main.rs");
        assert_eq!(prompt.text_chars(), 3);
    }

    #[test]
    fn capabilities_come_from_the_initialize_result() {
        let result = serde_json::json!({"agentCapabilities": {"promptCapabilities": {"image": true, "audio": false}}});
        assert_eq!(
            PromptCapabilities::from_initialize(&result),
            PromptCapabilities {
                image: true,
                audio: false,
                embedded_context: false
            }
        );
    }
}
