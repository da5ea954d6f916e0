//! The [`Reviewer`] that asks the API server: a TokenReview for whose token it is, a
//! SubjectAccessReview on the non-resource URL for whether they may. The operator's
//! ServiceAccount needs `create` on `tokenreviews` and `subjectaccessreviews` (the chart's
//! `<fullname>-delegated-auth` ClusterRole).

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Client;
use kube::api::{Api, PostParams};

use super::access::{Authentication, Authorization, Identity, ReviewError, Reviewer};

/// Reviews through the API server, with the operator's own client.
pub struct ApiServerReviewer {
    client: Client,
}

impl ApiServerReviewer {
    /// A reviewer using `client` (not the fenced one: a standby replica serves too).
    pub fn new(client: Client) -> Self {
        ApiServerReviewer { client }
    }
}

#[async_trait::async_trait]
impl Reviewer for ApiServerReviewer {
    async fn authenticate(&self, token: &str) -> Result<Authentication, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let answer = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| ReviewError(format!("TokenReview: {e}")))?;
        let status = answer.status.unwrap_or_default();
        let user = status.user.unwrap_or_default();
        match (status.authenticated, user.username) {
            (Some(true), Some(username)) if !username.is_empty() => {
                Ok(Authentication::Known(Identity {
                    username,
                    uid: user.uid,
                    groups: user.groups.unwrap_or_default(),
                    extra: user.extra.unwrap_or_default(),
                }))
            }
            _ => Ok(Authentication::Unknown(
                status
                    .error
                    .filter(|e| !e.is_empty())
                    .unwrap_or_else(|| "the API server does not accept this token".to_string()),
            )),
        }
    }

    async fn authorize(
        &self,
        who: &Identity,
        verb: &str,
        path: &str,
    ) -> Result<Authorization, ReviewError> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(who.username.clone()),
                uid: who.uid.clone(),
                groups: Some(who.groups.clone()),
                extra: Some(who.extra.clone()),
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(path.to_string()),
                    verb: Some(verb.to_string()),
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        let answer = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| ReviewError(format!("SubjectAccessReview: {e}")))?;
        let status = answer.status.unwrap_or_default();
        if let Some(error) = status.evaluation_error.filter(|e| !e.is_empty())
            && !status.allowed
        {
            return Ok(Authorization::Denied(error));
        }
        Ok(if status.allowed {
            Authorization::Allowed
        } else {
            Authorization::Denied(status.reason.unwrap_or_default())
        })
    }
}
