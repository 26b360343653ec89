//! Each question the templates ask of a Pod, held once for the template the Pod chose.
//!
//! Every template's part asks the same questions (its containers the Pod already has, its
//! denial, whether it injects...), each as a variable of its own scope. The API server
//! prepares every variable of a policy for each Pod it evaluates, match condition
//! included, so ten templates' variables cost a Pod that did not opt in more than one
//! template's. A template's variables are only ever read once the Pod chose that template
//! (the mutation and the refusal ask `variables.choice` first), so each question can be
//! one variable, `chosen_<question>`, that switches on the choice; what it evaluates is
//! the chosen template's expression, as before. A question whose switch would be longer
//! than the API server compiles, and the questions kept apart (each template's additions,
//! the largest), stay one variable per template.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::admissionregistration::v1::Variable;

use super::cel;
use super::variables::{CHOICE, Scope, names_read, references, variable};

/// The questions kept one variable per template: large enough that a switch over many
/// templates would pass what the API server compiles in one expression.
const KEPT_APART: &[&str] = &["additions"];

/// One template's variables, in its scope.
pub struct TemplateVariables<'a> {
    pub scope: &'a Scope,
    pub template: &'a str,
    pub variables: &'a [Variable],
}

/// The templates' variables merged into one per question (see the module), in an order
/// where each comes after what it reads; `texts` (the expressions that read them: the
/// mutation, the refusal) rewritten to read the merged ones. `max_code_points`: the
/// longest expression the API server compiles.
pub fn merge(parts: &[TemplateVariables<'_>], texts: &mut [String], max_code_points: usize) -> Vec<Variable> {
    // Each question, in the order first asked, and its branches: (template, its
    // variable's name, its expression).
    type Branch<'v> = (&'v str, &'v str, &'v str);
    let mut questions: Vec<(&str, Vec<Branch<'_>>)> = Vec::new();
    for part in parts {
        for v in part.variables {
            let question = part.scope.question(&v.name).unwrap_or(v.name.as_str());
            let branch = (part.template, v.name.as_str(), v.expression.as_str());
            match questions.iter_mut().find(|(q, _)| *q == question) {
                Some((_, branches)) => branches.push(branch),
                None => questions.push((question, vec![branch])),
            }
        }
    }
    // Every scoped name of a merged question to the one name.
    let renaming = |merging: &BTreeSet<&str>| -> BTreeMap<String, String> {
        questions
            .iter()
            .filter(|(q, _)| merging.contains(q))
            .flat_map(|(q, branches)| branches.iter().map(|(_, name, _)| (name.to_string(), merged_name(q))))
            .collect()
    };
    let switch = |branches: &[Branch<'_>], renamed: &BTreeMap<String, String>| -> String {
        let expressions: Vec<String> = branches.iter().map(|(_, _, e)| rename(e, renamed)).collect();
        // A question every template asks in the same words (the rules, over each one's own
        // data) needs no switch.
        if expressions.iter().all(|e| *e == expressions[0]) {
            return format!("({})", expressions[0]);
        }
        let mut text = String::new();
        let last = branches.len() - 1;
        for (i, ((template, _, _), expression)) in branches.iter().zip(expressions).enumerate() {
            if i == last {
                // Read only when the Pod chose one of these templates: the last needs no test.
                text.push_str(&format!("({expression})"));
            } else {
                text.push_str(&format!("{CHOICE} == {} ? ({expression}) :\n", cel::string(template)));
            }
        }
        text
    };

    // A question whose switch would be too long keeps its scoped names; that lengthens
    // the switches that read them, so decide until nothing changes. Lengths are those
    // after renaming (a merged name is longer than a scoped one).
    let mut merging: BTreeSet<&str> = questions
        .iter()
        .map(|(q, _)| *q)
        .filter(|q| !KEPT_APART.contains(q))
        .collect();
    let renamed = loop {
        let renamed = renaming(&merging);
        let asked = merging.len();
        merging.retain(|q| {
            let (_, branches) = questions
                .iter()
                .find(|(asked, _)| asked == q)
                .expect("a question asked");
            switch(branches, &renamed).chars().count() <= max_code_points
        });
        if merging.len() == asked {
            break renamed;
        }
    };

    let mut out: Vec<Variable> = Vec::new();
    for (question, branches) in &questions {
        if merging.contains(question) {
            out.push(variable(&merged_name(question), switch(branches, &renamed)));
        } else {
            out.extend(
                branches
                    .iter()
                    .map(|(_, name, expression)| variable(name, rename(expression, &renamed))),
            );
        }
    }
    for text in texts.iter_mut() {
        *text = rename(text, &renamed);
    }
    in_reading_order(out)
}

fn merged_name(question: &str) -> String {
    format!("chosen_{question}")
}

/// `text` with every `variables.NAME` of `renamed` read as its new name.
fn rename(text: &str, renamed: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for at in references(text) {
        if let Some(to) = renamed.get(&text[at.clone()]) {
            out.push_str(&text[copied..at.start]);
            out.push_str(to);
            copied = at.end;
        }
    }
    out.push_str(&text[copied..]);
    out
}

/// `variables` ordered so that each comes after every one it reads (the API server
/// compiles a variable against those before it), otherwise as given.
fn in_reading_order(variables: Vec<Variable>) -> Vec<Variable> {
    let names: BTreeSet<String> = variables.iter().map(|v| v.name.clone()).collect();
    let reads: Vec<BTreeSet<String>> = variables
        .iter()
        .map(|v| {
            names_read(&v.expression)
                .into_iter()
                .filter(|n| *n != v.name && names.contains(*n))
                .map(str::to_string)
                .collect()
        })
        .collect();
    let mut placed: BTreeSet<String> = BTreeSet::new();
    let mut order: Vec<usize> = Vec::with_capacity(variables.len());
    while order.len() < variables.len() {
        let next = (0..variables.len())
            .find(|&i| !placed.contains(&variables[i].name) && reads[i].iter().all(|n| placed.contains(n)));
        // A circle cannot be written (each variable reads only earlier questions); were
        // there one, the rest keep their order and the API server names it.
        let Some(next) = next else {
            order.extend((0..variables.len()).filter(|&i| !placed.contains(&variables[i].name)));
            break;
        };
        placed.insert(variables[next].name.clone());
        order.push(next);
    }
    let mut slots: Vec<Option<Variable>> = variables.into_iter().map(Some).collect();
    order.into_iter().filter_map(|i| slots[i].take()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Templates `config` and `other`, in that order.
    fn two<'a>(s0: &'a Scope, v0: &'a [Variable], s1: &'a Scope, v1: &'a [Variable]) -> [TemplateVariables<'a>; 2] {
        [
            TemplateVariables {
                scope: s0,
                template: "config",
                variables: v0,
            },
            TemplateVariables {
                scope: s1,
                template: "other",
                variables: v1,
            },
        ]
    }

    fn names(variables: &[Variable]) -> Vec<&str> {
        variables.iter().map(|v| v.name.as_str()).collect()
    }

    #[test]
    fn each_question_becomes_one_switch_and_what_reads_it_reads_that() {
        let (s0, s1) = (Scope::new(0), Scope::new(1));
        let v0 = [
            s0.variable("present", String::from("[\"a\"]")),
            s0.variable("inject", format!("size({}) == 0", s0.get("present"))),
            s0.variable("additions", format!("{} ? [1] : []", s0.get("inject"))),
        ];
        let v1 = [
            s1.variable("present", String::from("[\"b\"]")),
            s1.variable("inject", format!("size({}) == 0", s1.get("present"))),
            s1.variable("additions", format!("{} ? [2] : []", s1.get("inject"))),
        ];
        let mut texts = [format!("{} && {}", s0.get("inject"), s1.get("additions"))];
        let merged = merge(&two(&s0, &v0, &s1, &v1), &mut texts, 100_000);
        assert_eq!(
            names(&merged),
            ["chosen_present", "chosen_inject", "t0_additions", "t1_additions"]
        );
        assert_eq!(
            merged[0].expression,
            "variables.choice == \"config\" ? ([\"a\"]) :\n([\"b\"])"
        );
        assert_eq!(merged[2].expression, "variables.chosen_inject ? [1] : []");
        assert_eq!(texts[0], "variables.chosen_inject && variables.t1_additions");
    }

    #[test]
    fn a_question_too_long_to_switch_stays_one_variable_per_template() {
        let (s0, s1) = (Scope::new(0), Scope::new(1));
        // Each template's own words: a switch of the two is longer than 120.
        let long = |c: &str| format!("\"{}\"", c.repeat(60));
        let v0 = [
            s0.variable("native", String::from("true")),
            s0.variable("denial", format!("{} ? {} : \"\"", s0.get("native"), long("x"))),
        ];
        let v1 = [
            s1.variable("native", String::from("false")),
            s1.variable("denial", format!("{} ? {} : \"\"", s1.get("native"), long("y"))),
        ];
        let mut texts = [format!("{} + {}", s0.get("denial"), s1.get("denial"))];
        let merged = merge(&two(&s0, &v0, &s1, &v1), &mut texts, 120);
        assert_eq!(names(&merged), ["chosen_native", "t0_denial", "t1_denial"]);
        assert!(
            merged[1].expression.starts_with("variables.chosen_native ? "),
            "{}",
            merged[1].expression
        );
        assert_eq!(texts[0], "variables.t0_denial + variables.t1_denial");
    }

    #[test]
    fn a_question_asked_in_the_same_words_by_every_template_is_no_switch() {
        let (s0, s1) = (Scope::new(0), Scope::new(1));
        let v0 = [
            s0.variable("data", String::from("[1]")),
            s0.variable("rule", format!("{}.map(x, x + 1)", s0.get("data"))),
        ];
        let v1 = [
            s1.variable("data", String::from("[2]")),
            s1.variable("rule", format!("{}.map(x, x + 1)", s1.get("data"))),
        ];
        let merged = merge(&two(&s0, &v0, &s1, &v1), &mut [], 100_000);
        assert_eq!(names(&merged), ["chosen_data", "chosen_rule"]);
        assert_eq!(merged[0].expression, "variables.choice == \"config\" ? ([1]) :\n([2])");
        assert_eq!(merged[1].expression, "(variables.chosen_data.map(x, x + 1))");
    }

    #[test]
    fn renaming_touches_whole_names_only() {
        let renamed = BTreeMap::from([(String::from("t0_a"), String::from("chosen_a"))]);
        assert_eq!(
            rename("variables.t0_a + variables.t0_ab + variables.t0_a.size()", &renamed),
            "variables.chosen_a + variables.t0_ab + variables.chosen_a.size()"
        );
    }

    #[test]
    fn a_variable_comes_after_what_it_reads() {
        let ordered = in_reading_order(vec![
            variable("chosen_denial", String::from("variables.chosen_ports != \"\"")),
            variable("chosen_ports", String::from("variables.podPorts")),
            variable("t0_additions", String::from("variables.chosen_denial")),
        ]);
        assert_eq!(names(&ordered), ["chosen_ports", "chosen_denial", "t0_additions"]);
    }
}
