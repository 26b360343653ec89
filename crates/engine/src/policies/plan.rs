//! `inject::plan` asked in CEL: whether a template goes into the Pod the API server holds,
//! and if not, the words the webhook denies it with. Each message is the webhook's own
//! error type written with holes ([`cel::hole`]) where the Pod's values go, so the text
//! cannot drift from the webhook's. The refusal of every template, and of a template the
//! ConfigMap does not have, is one variable ([`REFUSAL`]) the policy marks the Pod with.

use k8s_openapi::api::admissionregistration::v1::Variable;
use serde_json::{Map, Value};

use super::cel::{self, hole, words};
use super::variables::{
    self, ANNOTATIONS, CHOICE, CHOSEN_BY_ANNOTATION, CONTAINERS, INIT_CONTAINERS, OPTED_IN, OVERRIDE_KEYS,
    POD_CONTAINER_NAMES, POD_MOUNT_PATHS, POD_PORTS, POD_VOLUME_NAMES, Scope, VOLUMES, port_key, variable,
};
use crate::inject::overrides::{Outside, Reason, Refused, target_name};
use crate::inject::{Fault, InjectError, OVERRIDE_PREFIX, VOLUME_DESCRIPTION_LIMIT, describe_volume};
use crate::template::quantity::QuantityError;
use crate::template::{Bound, OutOfBounds, Override, Template};

/// The webhook's words for the Pod, `""` when it would not deny it: the denial of the
/// template it chose, or the one naming a template the ConfigMap does not have.
pub const REFUSAL: &str = "variables.refusal";

/// The sources a Volume may name, sorted as the webhook's JSON sorts them: the first one
/// present is what a collision message describes.
const VOLUME_SOURCES: &[&str] = &[
    "awsElasticBlockStore",
    "azureDisk",
    "azureFile",
    "cephfs",
    "cinder",
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "fc",
    "flexVolume",
    "flocker",
    "gcePersistentDisk",
    "gitRepo",
    "glusterfs",
    "hostPath",
    "image",
    "iscsi",
    "nfs",
    "persistentVolumeClaim",
    "photonPersistentDisk",
    "portworxVolume",
    "projected",
    "quobyte",
    "rbd",
    "scaleIO",
    "secret",
    "storageos",
    "vsphereVolume",
];

/// The variables of one template (`scope`): what it finds in the Pod, each denial, and
/// the verdict (`inject`, `denial`).
pub fn variables(template: &Template, scope: &Scope) -> Vec<Variable> {
    let names: Vec<&str> = template.container_names().collect();
    let names = cel::strings(names);
    let mut found = Vec::new();
    for fault in Fault::IN_ORDER {
        match fault {
            Fault::Partial => found.extend([
                scope.variable("present", format!("{names}.filter(n, n in {POD_CONTAINER_NAMES})")),
                scope.variable("missing", format!("{names}.filter(n, !(n in {POD_CONTAINER_NAMES}))")),
            ]),
            Fault::Overrides => found.push(scope.variable("overrideDenial", override_denial(template))),
            Fault::Ports | Fault::Volumes | Fault::Mounts => {
                found.extend(collision(fault, template).map(|(name, denials)| scope.variable(name, denials)))
            }
        }
    }
    found
        .into_iter()
        .chain([
            scope.variable("denial", denial(template, scope)),
            scope.variable(
                "inject",
                format!(
                    "{OPTED_IN} && {CHOICE} == {} && size({CONTAINERS}) > 0 && size({}) == 0 && {} == \"\"",
                    cel::string(&template.name),
                    scope.get("present"),
                    scope.get("denial"),
                ),
            ),
        ])
        .collect()
}

/// A collision fault's variable of the refusals that apply, where the template has
/// something to collide (a port, a volume, a mount); none for the other faults.
fn collision(fault: Fault, template: &Template) -> Option<(&'static str, String)> {
    let (name, denials) = match fault {
        Fault::Partial | Fault::Overrides => return None,
        Fault::Ports => ("portDenials", port_denials(template)),
        Fault::Volumes => ("volumeDenials", volume_denials(template)),
        Fault::Mounts => ("mountDenials", mount_denials(template)),
    };
    Some((name, denials?))
}

/// The first of the webhook's refusals, in its order ([`Fault::IN_ORDER`]); none for a Pod
/// without containers (the API server's own validation refuses it) or with all of the
/// template's already. Read only for a Pod that opted in and chose this template.
fn denial(template: &Template, scope: &Scope) -> String {
    let partial = InjectError::PartiallyInjected {
        template: template.name.clone(),
        present: hole(0),
        missing: hole(1),
    }
    .to_string();
    let backticked = |list: &str| format!("{list}.map(n, \"`\" + n + \"`\").join(\", \")");
    let (present, missing) = (scope.get("present"), scope.get("missing"));
    let partial = words(
        &partial,
        &[(&hole(0), &backticked(&present)), (&hole(1), &backticked(&missing))],
    );
    let mut chain = format!("size({CONTAINERS}) == 0 ? \"\" :\n");
    for fault in Fault::IN_ORDER {
        match fault {
            Fault::Partial => chain.push_str(&format!(
                "size({present}) > 0 ? (size({missing}) > 0 ? {partial} : \"\") :\n"
            )),
            Fault::Overrides => {
                let denial = scope.get("overrideDenial");
                chain.push_str(&format!("{denial} != \"\" ? {denial} :\n"));
            }
            Fault::Ports | Fault::Volumes | Fault::Mounts => {
                if let Some((name, _)) = collision(fault, template) {
                    let denials = scope.get(name);
                    chain.push_str(&format!("size({denials}) > 0 ? {denials}[0] :\n"));
                }
            }
        }
    }
    // Resources last, as the webhook decides them once the plan knows the added
    // containers as this Pod gets them (`policies::resources`).
    let resources = scope.get("resourcesDenial");
    chain.push_str(&format!("{resources} != \"\" ? {resources} :\n"));
    chain.push_str("\"\"");
    chain
}

/// [`REFUSAL`]: for an opted-in Pod, the webhook's words naming a template the set does
/// not have (`names`), else the denial of the compiled template it chose (`compiled`); a
/// template left to the webhook refuses nothing here.
pub fn refusal(names: &[&str], compiled: &[(Scope, &Template)]) -> Variable {
    let available = names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    let name_hole = hole(0);
    let by_annotation = InjectError::UnknownTemplate {
        name: name_hole.clone(),
        available: available.clone(),
    }
    .to_string();
    let by_label = InjectError::UnknownNamespaceTemplate {
        name: name_hole.clone(),
        namespace: hole(1),
        available: available.clone(),
    }
    .to_string();
    // Named by neither: the set has no default.
    let no_default = InjectError::NoDefaultTemplate { available }.to_string();
    let unknown = format!(
        "({CHOSEN_BY_ANNOTATION} ? {} : {} != \"\" ? {} : {})",
        words(&by_annotation, &[(&name_hole, CHOICE)]),
        variables::chosen_by_label(),
        words(&by_label, &[(&name_hole, CHOICE), (&hole(1), "request.namespace")]),
        words(&no_default, &[])
    );
    let mut chain = format!(
        "!{OPTED_IN} ? \"\" :\n!({CHOICE} in {}) ? {unknown} :\n",
        cel::strings(names.iter().copied())
    );
    for (scope, template) in compiled {
        chain.push_str(&format!(
            "{CHOICE} == {} ? {} :\n",
            cel::string(&template.name),
            scope.get("denial")
        ));
    }
    chain.push_str("\"\"");
    variable("refusal", chain)
}

/// The escaped inside of a JSON string of `expr` (as serde_json writes it), for a message
/// that quotes a value the Pod gave: the quotes are the message's, the escapes are these.
fn escaped(expr: &str) -> String {
    let common = format!(
        r#"{expr}.replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")"#
    );
    // The other characters below U+0020: rare, so looked for once before 27 replaces.
    let mut rare = String::new();
    for code in (0u32..0x20).filter(|c| ![0x09, 0x0a, 0x0d].contains(c)) {
        let written = match code {
            0x08 => String::from(r"\\b"),
            0x0c => String::from(r"\\f"),
            _ => format!(r"\\u{code:04x}"),
        };
        rare.push_str(&format!(r#".replace("\u{code:04x}", "{written}")"#));
    }
    format!(r#"({expr}.matches("[\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f]") ? {common}{rare} : {common})"#)
}

/// Every override annotation the template refuses, joined as the webhook joins them, in
/// the order the API server sends annotations (sorted by key).
fn override_denial(template: &Template) -> String {
    let name_hole = hole(0);
    let value_hole = hole(1);
    let refused = |reason: Reason| {
        Refused {
            name: name_hole.clone(),
            value: value_hole.clone(),
            template: template.name.clone(),
            reason,
        }
        .to_string()
    };
    // Each override annotation as [key, its value escaped]: the escaping is written, and
    // runs, once per annotation rather than in every message that quotes the value.
    let value = format!("{ANNOTATIONS}[e[0]]");
    let escaped_value = String::from("e[1]");
    let holes = |name: &str| -> [(String, String); 2] {
        [
            (name_hole.clone(), cel::string(name)),
            (value_hole.clone(), escaped_value.clone()),
        ]
    };
    let fill = |text: &str, holes: &[(String, String)]| {
        let holes: Vec<(&str, &str)> = holes.iter().map(|(h, e)| (h.as_str(), e.as_str())).collect();
        words(text, &holes)
    };

    let declared: Vec<String> = template.overrides.iter().map(|o| o.name.clone()).collect();
    let undeclared = refused(Reason::Undeclared { declared });
    let undeclared = fill(
        &undeclared,
        &[
            (
                name_hole.clone(),
                format!("e[0].substring({})", OVERRIDE_PREFIX.chars().count()),
            ),
            (value_hole.clone(), escaped_value.clone()),
        ],
    );
    let mut chain = String::new();
    for decl in template.overrides.iter() {
        let key = cel::string(&format!("{OVERRIDE_PREFIX}{}", decl.name));
        let check = override_check(decl, &value, |why| {
            let text = refused(Reason::OutOfBounds(Box::new(Outside {
                why,
                target: target_name(&decl.target),
                container: decl.container.clone(),
            })));
            fill(&text, &holes(&decl.name))
        });
        chain.push_str(&format!("e[0] == {key} ? {check} :\n"));
    }
    format!(
        "size({OVERRIDE_KEYS}) == 0 ? \"\" : {OVERRIDE_KEYS}.map(k, [dyn(k), dyn({escaped})]).map(e,\n{chain}{undeclared}).filter(m, m != \"\").join(\"; \")",
        escaped = escaped(&format!("{ANNOTATIONS}[k]")),
    )
}

/// `""` when `value` is within `decl`'s bound, else its refusal (`message` writes one).
fn override_check(decl: &Override, value: &str, message: impl Fn(OutOfBounds) -> String) -> String {
    match &decl.bound {
        Bound::OneOf(allowed) => format!(
            "({value} in {} ? \"\" : {})",
            cel::strings(allowed.iter().map(String::as_str)),
            message(OutOfBounds::NotOneOf(allowed.clone()))
        ),
        Bound::Range { min, max } => {
            let found = hole(1);
            let not_a_quantity = |error: QuantityError| message(OutOfBounds::NotAQuantity(error.to_string()));
            let empty = not_a_quantity(QuantityError::Empty);
            let syntax = not_a_quantity(QuantityError::Syntax { found: found.clone() });
            let too_large = not_a_quantity(QuantityError::TooLarge { found });
            let mut checks = format!(
                "{value} == \"\" ? {empty} :\n!isQuantity({value}) ? {syntax} :\nquantity({value}).isGreaterThan(quantity(\"1e29\")) || quantity({value}).isLessThan(quantity(\"-1e29\")) ? {too_large} :\n"
            );
            if let Some(max) = max {
                checks.push_str(&format!(
                    "quantity({value}).isGreaterThan(quantity({})) ? {} :\n",
                    cel::string(max.as_str()),
                    message(OutOfBounds::AboveMax(max.clone()))
                ));
            }
            if let Some(min) = min {
                checks.push_str(&format!(
                    "quantity({value}).isLessThan(quantity({})) ? {} :\n",
                    cel::string(min.as_str()),
                    message(OutOfBounds::BelowMin(min.clone()))
                ));
            }
            format!("({checks}\"\")")
        }
    }
}

/// For each port of the template's sidecars (in its order), the refusal naming the first
/// Pod container (containers, then init containers) already using it.
fn port_denials(template: &Template) -> Option<String> {
    let mut checks = Vec::new();
    let mut keys = Vec::new();
    for sidecar in &template.spec.containers {
        for port in sidecar.ports.iter().flatten() {
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            keys.push(port_key(port.container_port, protocol));
            let uses = format!(
                "has(c.ports) && c.ports.exists(p, p.containerPort == {} && (has(p.protocol) ? p.protocol : \"TCP\") == {})",
                port.container_port,
                cel::string(protocol)
            );
            let text = InjectError::PortCollision {
                template: template.name.clone(),
                sidecar: sidecar.name.clone(),
                port: port.container_port,
                protocol: protocol.to_string(),
                container: hole(0),
            }
            .to_string();
            let all = format!("({CONTAINERS} + {INIT_CONTAINERS})");
            let message = words(&text, &[(&hole(0), &format!("{all}.filter(c, {uses})[0].name"))]);
            checks.push(format!("({all}.exists(c, {uses}) ? {message} : \"\")"));
        }
    }
    Some(only_if_found(&keys, POD_PORTS, filtered(checks)?))
}

/// `denials` only where one of `wanted` is in `found` (a list the shared variables read of
/// the Pod once): a collision check costs the Pods that could collide, no other.
fn only_if_found(wanted: &[String], found: &str, denials: String) -> String {
    format!(
        "{}.exists(w, w in {found}) ? {denials} : []",
        cel::strings(wanted.iter().map(String::as_str))
    )
}

/// `[a, b, ...].filter(m, m != "")`: the refusals that apply, first one first; none
/// when there is nothing to check.
fn filtered(checks: Vec<String>) -> Option<String> {
    if checks.is_empty() {
        return None;
    }
    Some(format!("[{}].filter(m, m != \"\")", checks.join(",\n")))
}

/// For each template volume (in its order) that the Pod has by name with other content,
/// the refusal describing both.
fn volume_denials(template: &Template) -> Option<String> {
    let mut checks = Vec::new();
    for (volume, json) in template.spec.volumes.iter().zip(&template.prepared.volumes) {
        let wanted: Map<String, Value> = serde_json::from_str(json.get()).unwrap_or_default();
        let name = cel::string(&volume.name);
        let text = InjectError::VolumeCollision {
            name: volume.name.clone(),
            pod: hole(0),
            template: template.name.clone(),
            wanted: describe_volume(&wanted),
        }
        .to_string();
        // `[x].map(p, ...)[0]` names the Pod's volume once for every use.
        let message = words(&text, &[(&hole(0), &describe("p"))]);
        let same = subset_map("p", &wanted);
        checks.push(format!(
            "({VOLUMES}.exists(v, v.name == {name}) ? [{VOLUMES}.filter(v, v.name == {name})[0]].map(p, {same} ? \"\" : {message})[0] : \"\")"
        ));
    }
    let names: Vec<String> = template.spec.volumes.iter().map(|v| v.name.clone()).collect();
    Some(only_if_found(&names, POD_VOLUME_NAMES, filtered(checks)?))
}

/// The webhook's description of the Pod volume `volume`: its first source as compact JSON with
/// sorted keys, cut at [`VOLUME_DESCRIPTION_LIMIT`] characters.
fn describe(volume: &str) -> String {
    let mut chain = String::new();
    for source in VOLUME_SOURCES {
        let value = cel::field(volume, source);
        // `%s` writes sorted keys and `", "` between members and list entries; inside a
        // string a quote is escaped, so `, "` there is never the separator.
        chain.push_str(&format!(
            "{} ? {} + \"%s\".format([{value}]).replace(\", \\\"\", \",\\\"\").replace(\"}}, {{\", \"}},{{\") :\n",
            cel::has(volume, source),
            cel::string(&format!("{source}: "))
        ));
    }
    let limit = VOLUME_DESCRIPTION_LIMIT;
    format!("[{chain}\"no source\"].map(d, d.size() > {limit} ? d.substring(0, {limit}) + \"…\" : d)[0]")
}

/// CEL: every member of `wanted` is in the object `base` with the same value (arrays of
/// the same length, entry by entry), as `inject::pod::is_subset_map` compares them.
fn subset_map(base: &str, wanted: &Map<String, Value>) -> String {
    let members: Vec<String> = wanted
        .iter()
        .map(|(key, value)| format!("{} && {}", cel::has(base, key), subset(&cel::field(base, key), value)))
        .collect();
    if members.is_empty() {
        return String::from("true");
    }
    format!("({})", members.join(" && "))
}

fn subset(expr: &str, wanted: &Value) -> String {
    match wanted {
        Value::Object(map) => subset_map(expr, map),
        Value::Array(items) => {
            let mut checks = vec![format!("size({expr}) == {}", items.len())];
            checks.extend(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| subset(&format!("{expr}[{i}]"), item)),
            );
            format!("({})", checks.join(" && "))
        }
        scalar => format!("{expr} == {}", cel::value(scalar)),
    }
}

/// For each app container (in the Pod's order) and each template mount (in its order),
/// the refusal where the container mounts another volume at the template's path.
fn mount_denials(template: &Template) -> Option<String> {
    if template.spec.volume_mounts.is_empty() {
        return None;
    }
    let mut checks = Vec::new();
    for mount in &template.spec.volume_mounts {
        let path = cel::string(&mount.mount_path);
        let at_path = format!("c.volumeMounts.filter(vm, vm.mountPath == {path})[0].name");
        let text = InjectError::MountCollision {
            container: hole(0),
            existing: hole(1),
            path: mount.mount_path.clone(),
            template: template.name.clone(),
            volume: mount.name.clone(),
        }
        .to_string();
        let message = words(&text, &[(&hole(0), "c.name"), (&hole(1), &at_path)]);
        checks.push(format!(
            "(has(c.volumeMounts) && c.volumeMounts.exists(vm, vm.mountPath == {path}) && {at_path} != {} ? {message} : \"\")",
            cel::string(&mount.name)
        ));
    }
    let paths: Vec<String> = template
        .spec
        .volume_mounts
        .iter()
        .map(|m| m.mount_path.clone())
        .collect();
    let denials = format!(
        "{CONTAINERS}.map(c, [{}].filter(m, m != \"\")).flatten()",
        checks.join(",\n")
    );
    Some(only_if_found(&paths, POD_MOUNT_PATHS, denials))
}
