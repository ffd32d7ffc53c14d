//! The OpenAPI 3.1 document of the HTTP API, generated from the handlers' `#[utoipa::path]`
//! attributes (listed in `server::RouteDocs`) and the request and response types, built once and
//! served at `/openapi.json`.
//! `tests/ops/openapi.rs` checks that it documents exactly [`super::route_list`], that its
//! examples validate and are accepted, and that real responses match its schemas.

pub(super) mod examples;
pub(super) mod responses;

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, PartialSchema, ToSchema};

const DESCRIPTION: &str = "Generated from the daemon's types and handlers (`gavel`'s \
`src/server/openapi/`); `tests/ops/` checks that it documents exactly the daemon's routes, \
that its examples validate against its schemas and are accepted, and that real responses match \
the response schemas. Every error is `{\"error\": {\"type\", \"message\", \"param\"}}` \
(`param`: the request field it is about, or null). With API keys \
configured (`[server] api_keys_file` or `GAVEL_API_KEYS`), every route outside `[server] \
open_paths` (default `/healthz`, `/readyz`, `/metrics`) needs `Authorization: Bearer KEY`. \
Every response carries `x-request-id` (the caller's own, when it sent one).";

const SUMMARY: &str = "A reward service for RL of LLM agents: relative group judging, \
verifiable rewards, cached verdicts.";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "gavel",
        description = DESCRIPTION,
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    security(("bearerAuth" = [])),
    components(
        schemas(
            super::error::ErrorResponse,
            crate::domain::trajectory_wire::Message,
            crate::domain::trajectory_wire::Trajectory,
            crate::score::request_wire::Verifier,
        ),
        responses(
            responses::Unauthorized,
            responses::InvalidRequest,
            responses::RequestTimeout,
            responses::PayloadTooLarge,
            responses::Internal,
            responses::JudgeUnavailable,
            responses::NoJudgeConfigured,
            responses::JudgeTimeout,
        ),
    ),
)]
struct ApiDoc;

/// The `bearerAuth` scheme every operation's `security` names.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        let mut scheme = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build();
        scheme.description =
            Some("An API key from `[server] api_keys_file` or `GAVEL_API_KEYS`".into());
        components.add_security_scheme("bearerAuth", SecurityScheme::Http(scheme));
    }
}

/// An inline rubric's `verifiers` are specs like a request's: `rubric.rs` keeps them as JSON
/// values (the verifier module compiles them) and names no schema of the document's.
struct RubricVerifiers;

impl Modify for RubricVerifiers {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::schema::{ArrayItems, Schema};
        use utoipa::openapi::{Ref, RefOr};
        let rubric = doc
            .components
            .as_mut()
            .and_then(|c| c.schemas.get_mut("InlineRubric"));
        let Some(RefOr::T(Schema::Object(rubric))) = rubric else {
            panic!("InlineRubric is an object schema");
        };
        let Some(RefOr::T(Schema::Array(verifiers))) = rubric.properties.get_mut("verifiers")
        else {
            panic!("InlineRubric.verifiers is an array schema");
        };
        let verifier: RefOr<Schema> = Ref::from_schema_name("Verifier").into();
        verifiers.items = ArrayItems::RefOrSchema(Box::new(verifier));
    }
}

/// `crate::judge::JudgeInfo` (the judge module stays free of the document's types).
impl PartialSchema for crate::judge::JudgeInfo {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::ObjectBuilder;
        ObjectBuilder::new()
            .description(Some("A judge that scored: its `[judges.NAME]` and model"))
            .property("name", String::schema())
            .required("name")
            .property("model", String::schema())
            .required("model")
            .into()
    }
}

impl ToSchema for crate::judge::JudgeInfo {}

/// The whole document as JSON text: the routes' operations (`server::RouteDocs`, beside the
/// routes they document) with the document's info, shared components and security.
pub(super) fn document(routes: utoipa::openapi::OpenApi) -> String {
    let mut doc = ApiDoc::openapi();
    doc.merge(routes);
    // After the merge: the routes' own schemas (`InlineRubric`) are only there from then on.
    BearerAuth.modify(&mut doc);
    RubricVerifiers.modify(&mut doc);
    let mut doc = serde_json::to_value(doc).expect("the document serialises");
    // OpenAPI 3.1's `info.summary`, which utoipa's `Info` lacks.
    doc["info"]["summary"] = SUMMARY.into();
    // The version of the program that serves it (a client generated from the document can say
    // which daemon it was made for).
    doc["info"]["version"] = env!("CARGO_PKG_VERSION").into();
    serde_json::to_string_pretty(&doc).expect("the document serialises")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde_json::Value;

    fn doc() -> Value {
        serde_json::from_str(super::super::openapi()).expect("the document is JSON")
    }

    /// Every `$ref` in `v`.
    fn refs<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
        match v {
            Value::Object(o) => {
                for (k, x) in o {
                    match (k.as_str(), x) {
                        ("$ref", Value::String(r)) => out.push(r),
                        _ => refs(x, out),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn the_document_is_openapi_3_1_and_every_ref_resolves() {
        let doc = doc();
        if std::env::var_os("GAVEL_PRINT_OPENAPI").is_some() {
            println!("{}", super::super::openapi());
        }
        assert_eq!(doc["openapi"], "3.1.0");
        assert_eq!(doc["info"]["title"], "gavel");
        assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));
        let mut found = Vec::new();
        refs(&doc, &mut found);
        assert!(found.len() > 20, "{found:?}");
        for r in found {
            let pointer = r
                .strip_prefix('#')
                .unwrap_or_else(|| panic!("{r}: not local"));
            assert!(doc.pointer(pointer).is_some(), "{r} does not resolve");
        }
        // Every operation names its security, or inherits the document's, and every scheme
        // named exists.
        let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
        assert!(schemes.contains_key("bearerAuth"));
    }

    #[test]
    fn every_served_route_is_documented_and_nothing_else() {
        let doc = doc();
        let mut documented = BTreeSet::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                documented.insert((method.to_uppercase(), path.clone()));
                let what = format!("{method} {path}");
                assert!(op["operationId"].is_string(), "{what}: no operationId");
                assert!(op["responses"]["200"].is_object(), "{what}: no 200");
                assert!(op["responses"]["401"].is_object(), "{what}: no 401");
            }
        }
        let served: BTreeSet<(String, String)> = super::super::route_list()
            .into_iter()
            .map(|(m, p)| (m.to_string(), p.to_string()))
            .collect();
        assert_eq!(documented, served);
    }
}
