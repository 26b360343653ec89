//! Edits of the shipped ClusterRole, for the tier that takes a rule away (and puts it back).

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::{Api, PostParams};
use kube::{Client, Resource};

use super::super::api_error;
use super::Install;

impl Install {
    /// Replaces the ClusterRole's rules with the shipped ones minus the rule for `resource`;
    /// returns the rule taken away.
    pub async fn remove_cluster_role_rule(&self, client: &Client, resource: &str) -> PolicyRule {
        let shipped = self.cluster_role.rules.clone().unwrap_or_default();
        let (taken, kept): (Vec<PolicyRule>, Vec<PolicyRule>) = shipped
            .into_iter()
            .partition(|r| r.resources.iter().flatten().any(|x| x == resource));
        assert_eq!(
            taken.len(),
            1,
            "expected one ClusterRole rule for {resource}, found {taken:?}"
        );
        self.replace_cluster_role_rules(client, kept).await;
        taken.into_iter().next().expect("one rule")
    }

    /// Puts the shipped ClusterRole rules back.
    pub async fn restore_cluster_role(&self, client: &Client) {
        self.replace_cluster_role_rules(client, self.cluster_role.rules.clone().unwrap_or_default())
            .await;
    }

    async fn replace_cluster_role_rules(&self, client: &Client, rules: Vec<PolicyRule>) {
        let roles: Api<ClusterRole> = Api::all(client.clone());
        let name = self.cluster_role.meta().name.clone().unwrap_or_default();
        let mut role = roles
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("expected ClusterRole {name}, found: {}", api_error(&e)));
        role.rules = Some(rules);
        // A replace, not an apply: the rules must become exactly these, whoever else
        // applied the same ones before.
        roles
            .replace(&name, &PostParams::default(), &role)
            .await
            .unwrap_or_else(|e| panic!("expected to replace ClusterRole {name}, found: {}", api_error(&e)));
    }
}
