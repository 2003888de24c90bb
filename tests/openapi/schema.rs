//! Whether a JSON answer has the fields its documented schema names
//! (following `$ref`, `allOf`/`oneOf`, nullable types).

use std::collections::BTreeSet;

use serde_json::Value;

/// `value` has every field the schema `name` requires, and none it does not
/// name.
pub(crate) fn fits(doc: &Value, name: &str, value: &Value) {
    let schema = serde_json::json!({ "$ref": format!("#/components/schemas/{name}") });
    fits_schema(doc, &schema, value, name);
}

/// `value` has every field `schema` requires, and none it does not name
/// (through its `$ref`s and the parts of an `allOf`).
pub(crate) fn fits_schema(doc: &Value, schema: &Value, value: &Value, what: &str) {
    let (mut props, mut required) = (BTreeSet::new(), BTreeSet::new());
    shape(doc, schema, &mut props, &mut required);
    assert!(!props.is_empty(), "{what}: {schema} names no field");
    let fields = value
        .as_object()
        .unwrap_or_else(|| panic!("{what}: {value}"));
    for k in fields.keys() {
        assert!(
            props.contains(k),
            "{what}: the answer has {k:?}, the schema does not"
        );
    }
    for k in &required {
        assert!(
            fields.contains_key(k),
            "{what}: the schema requires {k:?}, the answer lacks it: {value}"
        );
    }
}

/// Every property `schema` names and every one it requires.
pub(crate) fn shape(
    doc: &Value,
    schema: &Value,
    props: &mut BTreeSet<String>,
    required: &mut BTreeSet<String>,
) {
    if let Some(name) = schema["$ref"]
        .as_str()
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
    {
        let target = &doc["components"]["schemas"][name];
        assert!(target.is_object(), "no schema {name}");
        return shape(doc, target, props, required);
    }
    for part in schema["allOf"].as_array().into_iter().flatten() {
        shape(doc, part, props, required);
    }
    props.extend(
        schema["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, _)| k.clone()),
    );
    required.extend(
        schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|k| k.as_str().unwrap().to_owned()),
    );
}
