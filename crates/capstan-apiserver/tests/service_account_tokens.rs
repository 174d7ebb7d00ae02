//! ServiceAccount tokens as kube-apiserver issues them, driven with real kubectl and at HTTP level:
//! ES256 JWTs from `kubectl create token` that verify with the key the server publishes
//! (`/.well-known/openid-configuration`, `/openid/v1/jwks`), are accepted by the API and by
//! TokenReview until they expire, and are refused for another audience, when tampered with, after
//! their ServiceAccount was deleted and recreated, and after the Pod they are bound to is gone; a
//! server with its own issuer and API audiences (`--service-account-issuer`, `--api-audiences`)
//! issues, publishes and accepts tokens by them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use base64::Engine;
use serde_json::{Value, json};
use support::raw::{request, request_as};
use support::{Server, kubectl, ok, start, start_with_token_issuer};

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
}

fn create_token(server: &Server, args: &[&str]) -> String {
    let mut all = vec!["-n", "team-a", "create", "token", "bot"];
    all.extend_from_slice(args);
    ok(&kubectl(server, &all, None)).trim().to_owned()
}

/// The status code of listing ConfigMaps in `team-a` with `token`.
fn list_with(server: &Server, token: &str) -> u16 {
    request_as(
        server,
        Some(token),
        "GET",
        "/api/v1/namespaces/team-a/configmaps",
        "application/json",
        b"",
    )
    .0
}

/// A TokenReview of `token` for `audiences` by the admin: the review's status.
fn review(server: &Server, token: &str, audiences: &[&str]) -> Value {
    let body = json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": token, "audiences": audiences},
    });
    let (code, answer) = request(
        server,
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        "application/json",
        body.to_string().as_bytes(),
    );
    assert_eq!(code, 201, "{answer}");
    serde_json::from_str::<Value>(&answer).unwrap()["status"].clone()
}

fn claims_of(token: &str) -> Value {
    let payload = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&b64().decode(payload).unwrap()).unwrap()
}

fn setup(server: &Server) {
    ok(&kubectl(server, &["create", "namespace", "team-a"], None));
    ok(&kubectl(
        server,
        &["-n", "team-a", "create", "serviceaccount", "bot"],
        None,
    ));
    ok(&kubectl(
        server,
        &[
            "-n",
            "team-a",
            "create",
            "rolebinding",
            "bot-view",
            "--clusterrole=view",
            "--serviceaccount=team-a:bot",
        ],
        None,
    ));
}

#[test]
fn tokens_are_jwts_that_verify_with_the_published_key() {
    let server = start();
    setup(&server);
    let token = create_token(&server, &["--duration", "10m"]);
    let header = jsonwebtoken::decode_header(&token).unwrap();
    assert_eq!(header.alg, jsonwebtoken::Algorithm::ES256);

    // The discovery documents, readable by ServiceAccounts (not anonymously, as upstream).
    let get = |path: &str| {
        let (code, body) = request_as(&server, Some(&token), "GET", path, "application/json", b"");
        assert_eq!(code, 200, "{path}: {body}");
        serde_json::from_str::<Value>(&body).unwrap()
    };
    let discovery = get("/.well-known/openid-configuration");
    assert_eq!(discovery["issuer"], ISSUER);
    assert_eq!(discovery["jwks_uri"], format!("{ISSUER}/openid/v1/jwks"));
    assert_eq!(
        discovery["id_token_signing_alg_values_supported"],
        json!(["ES256"])
    );
    let (code, _) = request_as(
        &server,
        None,
        "GET",
        "/openid/v1/jwks",
        "application/json",
        b"",
    );
    assert_eq!(code, 403);

    // A relying party verifies the token with the published key alone.
    let jwks: jsonwebtoken::jwk::JwkSet = serde_json::from_value(get("/openid/v1/jwks")).unwrap();
    let jwk = jwks.find(header.kid.as_deref().unwrap()).unwrap();
    let key = jsonwebtoken::DecodingKey::from_jwk(jwk).unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.set_audience(&[ISSUER]);
    validation.set_issuer(&[ISSUER]);
    let verified = jsonwebtoken::decode::<Value>(&token, &key, &validation)
        .unwrap()
        .claims;
    assert_eq!(verified["sub"], "system:serviceaccount:team-a:bot");
    assert_eq!(verified["kubernetes.io"]["namespace"], "team-a");
    assert_eq!(verified["kubernetes.io"]["serviceaccount"]["name"], "bot");
    let uid = ok(&kubectl(
        &server,
        &[
            "-n",
            "team-a",
            "get",
            "sa",
            "bot",
            "-o",
            "jsonpath={.metadata.uid}",
        ],
        None,
    ));
    assert_eq!(
        verified["kubernetes.io"]["serviceaccount"]["uid"],
        uid.trim()
    );
    assert_eq!(
        verified["exp"].as_i64().unwrap() - verified["iat"].as_i64().unwrap(),
        600
    );
    assert_eq!(verified["nbf"], verified["iat"]);

    // The API and TokenReview accept it.
    assert_eq!(list_with(&server, &token), 200);
    let whoami = ok(&kubectl(
        &server,
        &[
            "--token",
            &token,
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        None,
    ));
    assert_eq!(whoami, "system:serviceaccount:team-a:bot");
    let status = review(&server, &token, &[]);
    assert_eq!(status["authenticated"], true, "{status}");
    assert_eq!(
        status["user"]["username"],
        "system:serviceaccount:team-a:bot"
    );
    assert_eq!(status["user"]["uid"], uid.trim());
    assert_eq!(status["audiences"], json!([ISSUER]));
    // Not for another audience.
    assert_eq!(review(&server, &token, &["vault"])["authenticated"], false);
    // The admin token and bootstrap-style credentials keep working beside JWTs.
    assert_eq!(list_with(&server, &server.token), 200);
    assert_eq!(review(&server, &server.token, &[])["authenticated"], true);

    // Tampered: another subject under the same signature, or a changed signature.
    let parts: Vec<&str> = token.split('.').collect();
    let mut claims = claims_of(&token);
    claims["sub"] = json!("system:serviceaccount:team-a:admin");
    claims["kubernetes.io"]["serviceaccount"]["name"] = json!("admin");
    let forged = format!(
        "{}.{}.{}",
        parts[0],
        b64().encode(claims.to_string()),
        parts[2]
    );
    assert_eq!(list_with(&server, &forged), 401);
    let mut signature = b64().decode(parts[2]).unwrap();
    signature[10] ^= 1;
    let resigned = format!("{}.{}.{}", parts[0], parts[1], b64().encode(signature));
    assert_eq!(list_with(&server, &resigned), 401);
    assert_eq!(review(&server, &forged, &[])["authenticated"], false);
}

#[test]
fn a_configured_issuer_and_api_audiences_decide_what_tokens_carry_and_which_authenticate() {
    const OWN_ISSUER: &str = "https://capstan.example.test:6443";
    let server = start_with_token_issuer(OWN_ISSUER, &["api", "also-api"]);
    setup(&server);

    // Without `--audience` a token is for the API audiences, and carries the issuer.
    let token = create_token(&server, &[]);
    let claims = claims_of(&token);
    assert_eq!(claims["iss"], OWN_ISSUER);
    assert_eq!(claims["aud"], json!(["api", "also-api"]));
    assert_eq!(list_with(&server, &token), 200);

    // Discovery names the issuer; a relying party checks tokens against it.
    let (code, body) = request_as(
        &server,
        Some(&token),
        "GET",
        "/.well-known/openid-configuration",
        "application/json",
        b"",
    );
    assert_eq!(code, 200, "{body}");
    let discovery: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(discovery["issuer"], OWN_ISSUER);
    assert_eq!(
        discovery["jwks_uri"],
        format!("{OWN_ISSUER}/openid/v1/jwks")
    );
    let (code, body) = request_as(
        &server,
        Some(&token),
        "GET",
        "/openid/v1/jwks",
        "application/json",
        b"",
    );
    assert_eq!(code, 200, "{body}");
    let jwks: jsonwebtoken::jwk::JwkSet = serde_json::from_str(&body).unwrap();
    let header = jsonwebtoken::decode_header(&token).unwrap();
    let key =
        jsonwebtoken::DecodingKey::from_jwk(jwks.find(header.kid.as_deref().unwrap()).unwrap())
            .unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::ES256);
    validation.set_audience(&["also-api"]);
    validation.set_issuer(&[OWN_ISSUER]);
    assert!(jsonwebtoken::decode::<Value>(&token, &key, &validation).is_ok());
    validation.set_issuer(&[ISSUER]);
    assert!(jsonwebtoken::decode::<Value>(&token, &key, &validation).is_err());

    // A token for one API audience among others authenticates; one for none of them is refused
    // (401, kubectl's "You must be logged in") though TokenReview vouches for it to its audience.
    let one_of_them = create_token(&server, &["--audience", "vault", "--audience", "also-api"]);
    assert_eq!(claims_of(&one_of_them)["aud"], json!(["vault", "also-api"]));
    assert_eq!(list_with(&server, &one_of_them), 200);
    let vault = create_token(&server, &["--audience", "vault"]);
    assert_eq!(list_with(&server, &vault), 401);
    let refused = kubectl(
        &server,
        &["--token", &vault, "-n", "team-a", "get", "configmaps"],
        None,
    );
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.contains("error: You must be logged in to the server"),
        "{said}"
    );
    let status = review(&server, &vault, &["vault"]);
    assert_eq!(status["authenticated"], true, "{status}");
    assert_eq!(status["audiences"], json!(["vault"]));
    // A review naming no audience checks for the API audiences.
    assert_eq!(review(&server, &vault, &[])["authenticated"], false);
    let status = review(&server, &token, &[]);
    assert_eq!(status["authenticated"], true, "{status}");
    assert_eq!(status["audiences"], json!(["api", "also-api"]));
    // The default issuer's audience is not this server's any more.
    let default_audience = create_token(&server, &["--audience", ISSUER]);
    assert_eq!(list_with(&server, &default_audience), 401);

    // Another issuer's token, signed with this very key, is refused.
    let pem = std::fs::read(server.dir.path().join("pki/sa.key")).unwrap();
    let der = rustls_pemfile::private_key(&mut pem.as_slice())
        .unwrap()
        .unwrap();
    let signing = jsonwebtoken::EncodingKey::from_ec_der(der.secret_der());
    let mut foreign = claims_of(&token);
    foreign["iss"] = json!(ISSUER);
    let foreign = jsonwebtoken::encode(&header, &foreign, &signing).unwrap();
    assert_eq!(list_with(&server, &foreign), 401);
    assert_eq!(review(&server, &foreign, &[])["authenticated"], false);
    let mut same = claims_of(&token);
    same["iss"] = json!(OWN_ISSUER);
    assert_eq!(
        list_with(
            &server,
            &jsonwebtoken::encode(&header, &same, &signing).unwrap()
        ),
        200
    );
}

#[test]
fn tokens_stop_working_at_expiry_for_other_audiences_and_when_their_account_is_recreated() {
    let server = start();
    setup(&server);

    // A token for another audience is refused by the API but reviewed as valid for that audience.
    let vault = create_token(&server, &["--audience", "vault"]);
    assert_eq!(claims_of(&vault)["aud"], json!(["vault"]));
    assert_eq!(list_with(&server, &vault), 401);
    let status = review(&server, &vault, &["vault", "other"]);
    assert_eq!(status["authenticated"], true, "{status}");
    assert_eq!(status["audiences"], json!(["vault"]));

    // Expiry, by a clock the test controls: tokens signed with the server's own key (its data
    // directory's `pki/sa.key`) with the claims the server issues, one valid now and one whose
    // validity ended an hour ago (beyond kube-apiserver's one-minute leeway).
    let token = create_token(&server, &[]);
    let pem = std::fs::read(server.dir.path().join("pki/sa.key")).unwrap();
    let der = rustls_pemfile::private_key(&mut pem.as_slice())
        .unwrap()
        .unwrap();
    let signing = jsonwebtoken::EncodingKey::from_ec_der(der.secret_der());
    let header = jsonwebtoken::decode_header(&token).unwrap();
    let sign = |shift: i64| {
        let mut claims = claims_of(&token);
        for claim in ["exp", "iat", "nbf"] {
            claims[claim] = json!(claims[claim].as_i64().unwrap() + shift);
        }
        jsonwebtoken::encode(&header, &claims, &signing).unwrap()
    };
    assert_eq!(list_with(&server, &sign(0)), 200);
    let expired = sign(-2 * 3600);
    assert_eq!(list_with(&server, &expired), 401);
    assert_eq!(review(&server, &expired, &[])["authenticated"], false);
    let expired_kubectl = kubectl(
        &server,
        &["--token", &expired, "-n", "team-a", "get", "configmaps"],
        None,
    );
    let said = String::from_utf8_lossy(&expired_kubectl.stderr);
    assert!(
        said.contains("error: You must be logged in to the server"),
        "{said}"
    );
    // Not valid yet.
    assert_eq!(list_with(&server, &sign(2 * 3600)), 401);

    // Deleted and recreated: same name, another uid.
    assert_eq!(list_with(&server, &token), 200);
    ok(&kubectl(
        &server,
        &["-n", "team-a", "delete", "serviceaccount", "bot"],
        None,
    ));
    ok(&kubectl(
        &server,
        &["-n", "team-a", "create", "serviceaccount", "bot"],
        None,
    ));
    assert_eq!(list_with(&server, &token), 401);
    assert_eq!(review(&server, &token, &[])["authenticated"], false);
    // A new token for the new account works.
    assert_eq!(list_with(&server, &create_token(&server, &[])), 200);
}

#[test]
fn tokens_bound_to_a_pod_end_with_it() {
    let server = start();
    setup(&server);
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "agent", "namespace": "team-a"},
        "spec": {"serviceAccountName": "bot", "containers": [{"name": "c", "image": "i"}]},
    });
    ok(&kubectl(
        &server,
        &["create", "-f", "-"],
        Some(&pod.to_string()),
    ));
    let token = create_token(
        &server,
        &["--bound-object-kind", "Pod", "--bound-object-name", "agent"],
    );
    let claims = claims_of(&token);
    assert_eq!(claims["kubernetes.io"]["pod"]["name"], "agent");
    assert_eq!(list_with(&server, &token), 200);
    let status = review(&server, &token, &[]);
    assert_eq!(
        status["user"]["extra"]["authentication.kubernetes.io/pod-name"],
        json!(["agent"])
    );
    ok(&kubectl(
        &server,
        &[
            "-n",
            "team-a",
            "delete",
            "pod",
            "agent",
            "--grace-period=0",
            "--force",
        ],
        None,
    ));
    assert_eq!(list_with(&server, &token), 401);
    // A bound object that does not exist is refused at issue.
    let missing = kubectl(
        &server,
        &[
            "-n",
            "team-a",
            "create",
            "token",
            "bot",
            "--bound-object-kind",
            "Pod",
            "--bound-object-name",
            "nope",
        ],
        None,
    );
    assert!(!missing.status.success());
}
