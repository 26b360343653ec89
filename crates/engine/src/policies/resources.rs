//! Pod-level resources and the QoS class in CEL: what the webhook's injection does to
//! resources (`inject::resources`), asked of the Pod the API server holds. That Pod is
//! already defaulted (a container's request from its limit, the Pod-level requests from
//! the containers' aggregate or the Pod-level limits), and its quantities are written as
//! the API server writes them, so the rules read it as it is.
//!
//! - The QoS class before injection ([`POD_QOS`]): read at Pod level when `spec.resources`
//!   names cpu or memory, else over every container, as the API server computes it.
//! - The added containers' `resources` as this Pod gets them (the template's, the overrides
//!   the Pod asks for), then kept to the class: Guaranteed sets each cpu and memory request
//!   and limit to the limit (or the request where there is no limit), BestEffort takes cpu
//!   and memory away; a container-level Guaranteed Pod whose added container sets neither is
//!   refused with the webhook's words ([`InjectError::GuaranteedLost`]).
//! - The Pod-level requests raised by what the aggregate of container requests grows by, the
//!   limits by the sidecars' limits (their requests where they set none), then at least each
//!   added container's limit and the request; equal again for a Pod-level Guaranteed Pod.
//!   Sums are exact (`amounts`) and written in the format the Pod's own value decides. A Pod
//!   whose amounts of one resource reach [`amounts::LIMIT`] units is refused, naming the fix.

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::Variable;
use k8s_openapi::api::core::v1::Container;

use super::amounts::{self, bind, of_text};
use super::cel::{self, hole};
use super::ops::{container_path, op};
use super::variables::{ANNOTATIONS, CHOICE, CONTAINERS, INIT_CONTAINERS, Scope, variable};
use crate::inject::{InjectError, OVERRIDE_PREFIX};
use crate::template::{Target, Template};

/// The Pod's QoS class before injection: `Guaranteed`, `Burstable` or `BestEffort`.
pub const POD_QOS: &str = "variables.podQos";
/// Whether the class is read of `spec.resources` (it names cpu or memory) rather than of
/// the containers.
pub const QOS_AT_POD_LEVEL: &str = "variables.podQosAtPodLevel";
/// Whether `spec.resources` has requests or limits: what the injection raises.
pub const POD_LEVEL: &str = "variables.podLevelResources";
/// Per resource, the amounts of the Pod's own containers: `[regular, native sidecars,
/// the largest init container with the native sidecars before it]`.
const POD_AMOUNTS: &str = "variables.podAmounts";
/// Per resource, every amount of the Pod (Pod-level and containers'), approximately: what
/// [`amounts::LIMIT`] is checked against.
const POD_APPROXIMATE: &str = "variables.podApproximate";

/// What the QoS class is read of, as the API server reads it.
const QOS_RESOURCES: [&str; 2] = ["cpu", "memory"];

/// `base.?requests[?"r"]` (`base` an optional of a `resources` object): the request,
/// defaulted from the limit as the API server defaults it; `""` for none.
fn effective_request(base: &str, resource: &str) -> String {
    let r = cel::string(resource);
    format!("{base}.?requests[?{r}].orValue({base}.?limits[?{r}].orValue(\"\"))")
}

fn limit(base: &str, resource: &str) -> String {
    format!("{base}.?limits[?{}].orValue(\"\")", cel::string(resource))
}

/// The class of one `resources` (`base`, an optional of it), as the API server's
/// `requirementsQOS`: per cpu and memory, Guaranteed where request and limit are equal and
/// not zero, BestEffort where both are zero, else Burstable; the two alike, or Burstable.
fn class_of(base: &str) -> String {
    let per = |resource: &str| {
        let r = cel::string(resource);
        format!(
            "[[quantity({base}.?requests[?{r}].orValue({base}.?limits[?{r}].orValue(\"0\"))), quantity({base}.?limits[?{r}].orValue(\"0\"))]].map(v, v[0].compareTo(v[1]) != 0 ? \"Burstable\" : v[0].compareTo(quantity(\"0\")) == 0 ? \"BestEffort\" : \"Guaranteed\")[0]"
        )
    };
    format!(
        "[[{}, {}]].map(k, k[0] == k[1] ? k[0] : \"Burstable\")[0]",
        per(QOS_RESOURCES[0]),
        per(QOS_RESOURCES[1])
    )
}

/// The variables every template's part reads of the Pod: its QoS class, and per resource
/// of `resources` (every resource a compiled template may set) its own amounts.
pub fn shared(resources: &BTreeSet<String>) -> Vec<Variable> {
    let pod = "object.spec.?resources";
    let mut out = vec![
        variable(
            // As the API server: any `spec.resources`, even empty, makes the class the Pod
            // level's.
            "podQosAtPodLevel",
            String::from("has(object.spec.resources)"),
        ),
        variable(
            "podQos",
            format!(
                "{QOS_AT_POD_LEVEL} ? {} : [({CONTAINERS} + {INIT_CONTAINERS}).map(c, {})].map(l, size(l) == 0 ? \"BestEffort\" : l.all(k, k == l[0]) ? l[0] : \"Burstable\")[0]",
                class_of(pod),
                class_of("c.?resources")
            ),
        ),
        variable(
            "podLevelResources",
            format!("size({pod}.?requests.orValue({{}})) + size({pod}.?limits.orValue({{}})) > 0"),
        ),
    ];
    if resources.is_empty() {
        return out;
    }
    let amounts: Vec<String> = resources
        .iter()
        .map(|r| format!("{}: {}", cel::string(r), own_amounts(r)))
        .collect();
    out.push(variable("podAmounts", format!("{{{}}}", amounts.join(", "))));
    let approximate: Vec<String> = resources
        .iter()
        .map(|r| {
            format!(
                "{}: ({CONTAINERS} + {INIT_CONTAINERS}).map(c, {} + {}).sum() + {} + {}",
                cel::string(r),
                amounts::approximate(&effective_request("c.?resources", r)),
                amounts::approximate(&limit("c.?resources", r)),
                amounts::approximate(&effective_request(pod, r)),
                amounts::approximate(&limit(pod, r)),
            )
        })
        .collect();
    out.push(variable("podApproximate", format!("{{{}}}", approximate.join(", "))));
    out
}

/// The Pod's own amounts of `resource`, as the API server aggregates container requests:
/// `[the regular containers, the native sidecars, the largest of each other init container
/// with the native sidecars before it]`.
fn own_amounts(resource: &str) -> String {
    let pairs = |list: &str| {
        format!(
            "{list}.map(c, {})",
            of_text(&effective_request("c.?resources", resource))
        )
    };
    let restartable = format!("{INIT_CONTAINERS}.map(c, c.?restartPolicy.orValue(\"\") == \"Always\")");
    let sidecars = amounts::sum_list("lists.range(size(pi)).filter(j, pf[j]).map(j, pi[j])");
    let peak = amounts::max_list(&format!(
        "[[0, 0]] + lists.range(size(pi)).filter(j, !pf[j]).map(j, {})",
        amounts::sum_list("[pi[j]] + lists.range(j).filter(k, pf[k]).map(k, pi[k])")
    ));
    let body = format!("[{}, {sidecars}, {peak}]", amounts::sum_list("pr"));
    bind(
        &pairs(CONTAINERS),
        "pr",
        &bind(&pairs(INIT_CONTAINERS), "pi", &bind(&restartable, "pf", &body)),
    )
}

/// A container the template adds: its own init containers first, then its sidecars.
struct Added<'t> {
    container: &'t Container,
    sidecar: bool,
}

fn added(template: &Template) -> Vec<Added<'_>> {
    let spec = &template.spec;
    spec.init_containers
        .iter()
        .map(|container| Added {
            container,
            sidecar: false,
        })
        .chain(spec.containers.iter().map(|container| Added {
            container,
            sidecar: true,
        }))
        .collect()
}

/// The resources `template` may set in a container (those it writes, those an override
/// writes), and cpu and memory always (the class asks of them whether the template sets
/// them or not): the columns of the tables below.
pub fn columns(template: &Template) -> Vec<String> {
    let mut out: BTreeSet<String> = QOS_RESOURCES.iter().map(|r| r.to_string()).collect();
    for added in added(template) {
        if let Some(resources) = &added.container.resources {
            for list in [&resources.requests, &resources.limits].into_iter().flatten() {
                out.extend(list.keys().cloned());
            }
        }
    }
    for decl in template.overrides.iter() {
        if let Target::Resource { resource, .. } = &decl.target {
            out.insert(resource.clone());
        }
    }
    out.into_iter().collect()
}

/// `""`, the CEL literal of no value.
const NONE: &str = "\"\"";

/// The text of `container`'s request (`limits` false) or limit of `resource` as this Pod
/// gets it: the template's, or the value of the last override of it the Pod asks for (in
/// the order the webhook applies them); `""` for none.
fn given(template: &Template, container: &Container, resource: &str, limits: bool) -> String {
    let resources = container.resources.as_ref();
    let list = resources.and_then(|r| if limits { r.limits.as_ref() } else { r.requests.as_ref() });
    let mut text = list
        .and_then(|l| l.get(resource))
        .map_or_else(|| String::from(NONE), |q| cel::string(&q.0));
    let target = Target::Resource {
        limits,
        resource: resource.to_string(),
    };
    for decl in template
        .overrides
        .iter()
        .filter(|o| o.container == container.name && o.target == target)
    {
        let key = cel::string(&format!("{OVERRIDE_PREFIX}{}", decl.name));
        // `string()`: the annotations are read as `dyn`, which a list of strings refuses.
        text = format!("({key} in {ANNOTATIONS} ? string({ANNOTATIONS}[{key}]) : {text})");
    }
    text
}

/// Whether `container`'s `resources.<list>` is there once the overrides the Pod asks for
/// are applied.
fn list_there(template: &Template, container: &Container, limits: bool) -> String {
    let resources = container.resources.as_ref();
    if resources.is_some_and(|r| {
        if limits {
            r.limits.is_some()
        } else {
            r.requests.is_some()
        }
    }) {
        return String::from("true");
    }
    let asked: Vec<String> = template
        .overrides
        .iter()
        .filter(|o| {
            o.container == container.name && matches!(&o.target, Target::Resource { limits: l, .. } if *l == limits)
        })
        .map(|o| {
            format!(
                "{} in {ANNOTATIONS}",
                cel::string(&format!("{OVERRIDE_PREFIX}{}", o.name))
            )
        })
        .collect();
    if asked.is_empty() {
        String::from("false")
    } else {
        format!("({})", asked.join(" || "))
    }
}

/// The questions whose expression every template writes alike (the rules over its data):
/// the policy holds each once, however many templates ask it.
pub const RULES: [&str; 6] = [
    "resourcesKept",
    "resourcesDenial",
    "addedAmounts",
    "podLevelValues",
    "resourceOps",
    "resourceStatus",
];

/// The variables of one template (`scope`). Its data: the columns, its added containers'
/// names, places, sidecar flags and `requests`/`limits` maps there, and their values as
/// this Pod gets them (`resourcesGiven`: per container, per column, `[request, limit]`,
/// `""` for none). The rules over the data, written alike for every template (so the
/// policy holds each once): the values kept to the class, the refusal, the added amounts,
/// the Pod-level values, the operations and the status member.
pub fn variables(template: &Template, scope: &Scope) -> Vec<Variable> {
    let columns = columns(template);
    let added = added(template);
    let table: Vec<String> = added
        .iter()
        .map(|a| {
            let cells: Vec<String> = columns
                .iter()
                .map(|r| {
                    format!(
                        "[{}, {}]",
                        given(template, a.container, r, false),
                        given(template, a.container, r, true)
                    )
                })
                .collect();
            format!("[{}]", cells.join(", "))
        })
        .collect();
    let list = |items: Vec<String>| format!("[{}]", items.join(", "));
    let data = [
        ("resourceColumns", cel::strings(columns.iter().map(String::as_str))),
        (
            "addedNames",
            cel::strings(added.iter().map(|a| a.container.name.as_str())),
        ),
        (
            "addedPaths",
            list(
                added
                    .iter()
                    .map(|a| container_path(template, scope, &a.container.name))
                    .collect(),
            ),
        ),
        (
            "addedSidecars",
            list(added.iter().map(|a| a.sidecar.to_string()).collect()),
        ),
        (
            "addedListsThere",
            list(
                added
                    .iter()
                    .map(|a| {
                        format!(
                            "[{}, {}]",
                            list_there(template, a.container, false),
                            list_there(template, a.container, true)
                        )
                    })
                    .collect(),
            ),
        ),
        ("resourcesGiven", list(table)),
    ];
    let rules = [
        (RULES[0], kept(scope)),
        (RULES[1], denial(scope)),
        (RULES[2], added_amounts(scope)),
        (RULES[3], pod_level_values(scope)),
        (RULES[4], operations(scope)),
        (RULES[5], status_member(scope)),
    ];
    data.into_iter()
        .chain(rules)
        .map(|(name, expression)| scope.variable(name, expression))
        .collect()
}

/// The added containers' values kept to the class: Guaranteed sets cpu and memory request
/// and limit to the limit (the request where there is none), BestEffort takes them away.
fn kept(scope: &Scope) -> String {
    format!(
        "{}.map(c, lists.range(size(c)).map(j, {}[j] in {} ? ({POD_QOS} == \"Guaranteed\" ? (c[j][1] != \"\" ? [c[j][1], c[j][1]] : [c[j][0], c[j][0]]) : {POD_QOS} == \"BestEffort\" ? [\"\", \"\"] : c[j]) : c[j]))",
        scope.get("resourcesGiven"),
        scope.get("resourceColumns"),
        cel::strings(QOS_RESOURCES)
    )
}

/// The words of a Pod whose amounts of a resource the policies cannot add exactly.
fn too_large(template: &str, resource: &str) -> String {
    format!(
        "template `{template}`: the Pod-level {resource} of this Pod and the {resource} of its containers add up to {} units or more, more than the compiled admission policies add exactly; lower them, or inject such Pods with the webhook (`serve --injection=webhook`)",
        amounts::LIMIT
    )
}

/// The refusal of the Pod's resources, `""` for none: a container-level Guaranteed Pod
/// that an added container without cpu or memory would make Burstable, in the webhook's
/// words (the first such container in the order they are added, cpu before memory), else
/// amounts too large to add exactly.
fn denial(scope: &Scope) -> String {
    let (columns, given, kept, names) = (
        scope.get("resourceColumns"),
        scope.get("resourcesGiven"),
        scope.get("resourcesKept"),
        scope.get("addedNames"),
    );
    let (template, container) = (hole(0), hole(1));
    let lost = |resource: &'static str| {
        let text = InjectError::GuaranteedLost {
            template: template.clone(),
            container: container.clone(),
            resource,
        }
        .to_string();
        cel::words(&text, &[(&template, CHOICE), (&container, &format!("{names}[lq[0]]"))])
    };
    // [container, resource] of each added container without a cpu or memory value.
    let without = format!(
        "lists.range(size({given})).map(i, lists.range(size({columns})).filter(j, {columns}[j] in {} && {given}[i][j][0] == \"\" && {given}[i][j][1] == \"\").map(j, [i, j])).flatten()",
        cel::strings(QOS_RESOURCES)
    );
    let lost_words = bind(
        &format!("{without}[0]"),
        "lq",
        &format!(
            "{columns}[lq[1]] == {} ? {} : {}",
            cel::string(QOS_RESOURCES[0]),
            lost(QOS_RESOURCES[0]),
            lost(QOS_RESOURCES[1])
        ),
    );
    let (resource_hole, template_hole) = (hole(1), hole(0));
    let large_words = cel::words(
        &too_large(&template_hole, &resource_hole),
        &[(&template_hole, CHOICE), (&resource_hole, &format!("{columns}[lj]"))],
    );
    let large = format!(
        "lists.range(size({columns})).filter(j, {POD_APPROXIMATE}[{columns}[j]] + {kept}.map(c, {} + {}).sum() >= {})",
        amounts::approximate("c[j][0]"),
        amounts::approximate("c[j][1]"),
        amounts::LIMIT
    );
    format!(
        "{POD_QOS} == \"Guaranteed\" && !{QOS_AT_POD_LEVEL} && size({without}) > 0 ? {lost_words} :\n{POD_LEVEL} && size({large}) > 0 ? {} :\n\"\"",
        bind(&format!("{large}[0]"), "lj", &large_words)
    )
}

/// Per column, the added containers' amounts: `[the sidecars' requests, their limits (or
/// requests where they set none), the largest request of the template's init containers,
/// the largest limit of any]`. Read only when [`POD_LEVEL`].
fn added_amounts(scope: &Scope) -> String {
    let per_container = format!(
        "{}.map(c, c.map(e, [{}, {}, {}]))",
        scope.get("resourcesKept"),
        of_text("e[0] != \"\" ? e[0] : e[1]"),
        of_text("e[1] != \"\" ? e[1] : e[0]"),
        of_text("e[1]")
    );
    let of_sidecars =
        |k: usize| amounts::sum_list(&format!("lists.range(size(ka)).filter(i, sf[i]).map(i, ka[i][j][{k}])"));
    let body = format!(
        "lists.range(size({})).map(j, [{}, {}, {}, {}])",
        scope.get("resourceColumns"),
        of_sidecars(0),
        of_sidecars(1),
        amounts::max_list("[[0, 0]] + lists.range(size(ka)).filter(i, !sf[i]).map(i, ka[i][j][0])"),
        amounts::max_list("[[0, 0]] + ka.map(k, k[j][2])")
    );
    bind(&per_container, "ka", &bind(&scope.get("addedSidecars"), "sf", &body))
}

/// Per column, `[request, limit]` of the Pod-level `spec.resources` after injection, each
/// `""` where the Pod names none or the injection leaves its value. Read only when
/// [`POD_LEVEL`].
fn pod_level_values(scope: &Scope) -> String {
    let own_request = "object.spec.resources.?requests[?r].orValue(\"\")";
    let own_limit = "object.spec.resources.?limits[?r].orValue(\"\")";
    let pair = |name: &str| String::from(name);
    // The aggregate of container requests before and after: the regular containers and
    // the native sidecars together; each init container with the native sidecars before
    // it (the added sidecars come before the Pod's own init containers when native).
    let before = amounts::max(&[amounts::sum(&[pair("pa[0]"), pair("pa[1]")]), pair("pa[2]")]);
    let after = amounts::max(&[
        amounts::sum(&[pair("pa[0]"), pair("pa[1]"), pair("aa[0]")]),
        format!(
            "({} ? {} : pa[2])",
            scope.get("native"),
            amounts::sum(&[pair("pa[2]"), pair("aa[0]")])
        ),
        pair("aa[2]"),
    ]);
    let grown = amounts::minus(&after, &before);
    let request = amounts::sum(&[of_text(own_request), pair("da")]);
    let limit = amounts::max_list(&format!(
        "[{}, aa[3]] + ({own_request} != \"\" ? [nq] : [])",
        amounts::sum(&[of_text(own_limit), pair("aa[1]")])
    ));
    // Guaranteed at Pod level: request and limit stay equal, at the larger.
    let finals = format!(
        "{POD_QOS} == \"Guaranteed\" && {QOS_AT_POD_LEVEL} && r in {} ? {} : [nq, nl]",
        cel::strings(QOS_RESOURCES),
        bind(&amounts::max(&[pair("nq"), pair("nl")]), "m", "[m, m]")
    );
    let changed = |own: &str, value: &str| {
        format!(
            "{own} != \"\" ? {} : \"\"",
            bind(
                &amounts::write_like(value, own),
                "wt",
                &format!("quantity(wt).compareTo(quantity({own})) != 0 ? wt : \"\"")
            )
        )
    };
    let written = format!("[{}, {}]", changed(own_request, "fp[0]"), changed(own_limit, "fp[1]"));
    let body = bind(&finals, "fp", &written);
    let body = bind(&limit, "nl", &body);
    let body = bind(&request, "nq", &body);
    let body = bind(&grown, "da", &body);
    let body = bind(&format!("{}[j]", scope.get("addedAmounts")), "aa", &body);
    let body = bind(&format!("{POD_AMOUNTS}[r]"), "pa", &body);
    let columns = scope.get("resourceColumns");
    format!(
        "lists.range(size({columns})).map(j, {})",
        bind(&format!("{columns}[j]"), "r", &body)
    )
}

fn remove(path: &str) -> String {
    format!("{{\"op\": dyn(\"remove\"), \"path\": dyn({path})}}")
}

/// The operations: each added container's cpu and memory set to what the class keeps
/// (after the overrides: a `requests` or `limits` map created where there is none), then
/// the Pod-level values that change.
fn operations(scope: &Scope) -> String {
    let (columns, given, kept) = (
        scope.get("resourceColumns"),
        scope.get("resourcesGiven"),
        scope.get("resourcesKept"),
    );
    let (paths, there) = (scope.get("addedPaths"), scope.get("addedListsThere"));
    let list = "[\"/resources/requests\", \"/resources/limits\"][k]";
    let at = format!("{paths}[i] + {list} + \"/\" + {columns}[j]");
    let per_list = format!(
        "(!{there}[i][k] && qj.exists(j, {kept}[i][j][k] != \"\" && {given}[i][j][k] == \"\") ? [{}] : []) + qj.filter(j, {kept}[i][j][k] != {given}[i][j][k]).map(j, {kept}[i][j][k] == \"\" ? {} : {})",
        op("add", &format!("{paths}[i] + {list}"), "{}"),
        remove(&at),
        op("add", &at, &format!("{kept}[i][j][k]"))
    );
    let containers = bind(
        &format!(
            "lists.range(size({columns})).filter(j, {columns}[j] in {})",
            cel::strings(QOS_RESOURCES)
        ),
        "qj",
        &format!("lists.range(size({given})).map(i, lists.range(2).map(k, {per_list}).flatten()).flatten()"),
    );
    let path = |list: &str| {
        format!(
            "{} + {columns}[j].replace(\"~\", \"~0\").replace(\"/\", \"~1\")",
            cel::string(&format!("/spec/resources/{list}/"))
        )
    };
    let pod_level = format!(
        "lists.range(size(v)).map(j, (v[j][0] != \"\" ? [{}] : []) + (v[j][1] != \"\" ? [{}] : [])).flatten()",
        op("add", &path("requests"), "v[j][0]"),
        op("add", &path("limits"), "v[j][1]")
    );
    format!(
        "{containers} + ({POD_LEVEL} ? {} : [])",
        bind(&scope.get("podLevelValues"), "v", &pod_level)
    )
}

/// The status annotation's member recording the Pod's own `spec.resources` (`limits`,
/// then `requests`, each by sorted key, as the webhook's status writes them) for `uninject`
/// to put back, when the injection changes a Pod-level value; else `""`.
fn status_member(scope: &Scope) -> String {
    let list = |name: &str| {
        format!(
            "(size(object.spec.resources.?{name}.orValue({{}})) > 0 ? \"\\\"{name}\\\":{{\" + object.spec.resources.{name}.map(k, k).sort().map(k, \"\\\"\" + k + \"\\\":\\\"\" + object.spec.resources.{name}[k] + \"\\\"\").join(\",\") + \"}}\" : \"\")"
        )
    };
    format!(
        "{POD_LEVEL} && {}.exists(x, x[0] != \"\" || x[1] != \"\") ? \",\\\"podResources\\\":{{\" + [{}, {}].filter(s, s != \"\").join(\",\") + \"}}\" : \"\"",
        scope.get("podLevelValues"),
        list("limits"),
        list("requests")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::{KubeVersion, TemplateSet};

    #[test]
    fn the_columns_are_every_resource_the_template_may_set_and_cpu_and_memory() {
        let text = "containers:
- name: side
  image: side:v1
  resources: {limits: {hugepages-2Mi: 2Mi, memory: 64Mi}}
initContainers:
- name: init
  image: init:v1
overrides:
  scratch: {container: init, field: resources.requests.ephemeral-storage, max: 1Gi}
";
        let data = [(String::from("config"), String::from(text))].into_iter().collect();
        let set = TemplateSet::from_data("test", &data, KubeVersion::NEWEST).expect("a template");
        let template = set.get("config").expect("config");
        assert_eq!(
            columns(template),
            ["cpu", "ephemeral-storage", "hugepages-2Mi", "memory"]
        );
        // The template's init container first, then its sidecar.
        let names: Vec<&str> = added(template).iter().map(|a| a.container.name.as_str()).collect();
        assert_eq!(names, ["init", "side"]);
        assert_eq!(
            given(template, &template.spec.containers[0], "hugepages-2Mi", true),
            "\"2Mi\""
        );
        assert_eq!(given(template, &template.spec.containers[0], "cpu", true), NONE);
        assert_eq!(list_there(template, &template.spec.containers[0], true), "true");
        assert_eq!(
            list_there(template, &template.spec.init_containers[0], false),
            "(\"sidecar.samplecrd.k8s.io/override.scratch\" in variables.annotations)"
        );
    }
}
