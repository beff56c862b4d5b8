"""CustomResourceDefinitions of the kinds the compiled trees hold beside Kubernetes' own, for the real API server.

Written here from the upstream API types (not copied): every field of each kind's `spec` that the release
declares, with its type, and the full property tree of each sub-object the compiled trees fill in; a sub-object
the trees never use keeps its upstream name but is left open (x-kubernetes-preserve-unknown-fields), so
these schemas prune or refuse a field the upstream CRD would not know everywhere the trees write.

Sources (field names and types, required fields, enums):
- cert-manager v1.16: pkg/apis/certmanager/v1/types_certificate.go (CertificateSpec, CertificatePrivateKey,
  KeyUsage), types_issuer.go (IssuerConfig, CAIssuer, SelfSignedIssuer), pkg/apis/meta/v1 (ObjectReference
  -> IssuerReference).
- prometheus-operator v0.79: pkg/apis/monitoring/v1/prometheusrule_types.go (RuleGroup, Rule),
  servicemonitor_types.go (ServiceMonitorSpec, Endpoint, NamespaceSelector), podmonitor_types.go
  (PodMonitorSpec, PodMetricsEndpoint).
- Flux v2.4: helm-controller api/v2/helmrelease_types.go (HelmReleaseSpec, HelmChartTemplate,
  HelmChartTemplateSpec, CrossNamespaceObjectReference, ValuesReference); source-controller
  api/v1/helmrepository_types.go (HelmRepositorySpec).
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]


def string(enum: tuple[str, ...] = ()) -> Schema:
    return {"type": "string", **({"enum": list(enum)} if enum else {})}


INTEGER: Schema = {"type": "integer"}
BOOLEAN: Schema = {"type": "boolean"}
OPEN: Schema = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
STRINGS: Schema = {"type": "array", "items": {"type": "string"}}
STRING_MAP: Schema = {"type": "object", "additionalProperties": {"type": "string"}}
INT_OR_STRING: Schema = {"x-kubernetes-int-or-string": True}
LABEL_SELECTOR: Schema = {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
    "matchLabels": STRING_MAP,
    "matchExpressions": {"type": "array", "items": {"type": "object", "required": ["key", "operator"], "properties": {
        "key": string(), "operator": string(), "values": STRINGS}}}}}
LOCAL_REFERENCE: Schema = {"type": "object", "required": ["name"], "properties": {"name": string()}}


def obj(properties: dict[str, Schema], required: tuple[str, ...] = ()) -> Schema:
    return {"type": "object", "properties": properties, **({"required": list(required)} if required else {})}


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def crd(group: str, version: str, kind: str, plural: str, spec: Schema, *, spec_required: bool = True,
        scope: str = "Namespaced") -> Schema:
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {"group": group, "scope": scope,
                 "names": {"kind": kind, "listKind": f"{kind}List", "plural": plural, "singular": kind.lower()},
                 "versions": [{"name": version, "served": True, "storage": True,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": obj({
                                   "apiVersion": string(), "kind": string(), "metadata": {"type": "object"},
                                   "spec": spec, "status": OPEN}, ("spec",) if spec_required else ())}}]},
    }


# --- cert-manager.io/v1 ------------------------------------------------------------------------------------

KEY_USAGES = ("signing", "digital signature", "content commitment", "key encipherment", "key agreement",
              "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth",
              "client auth", "code signing", "email protection", "s/mime", "ipsec end system", "ipsec tunnel",
              "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc")

CERTIFICATE = crd("cert-manager.io", "v1", "Certificate", "certificates", obj({
    "subject": OPEN, "literalSubject": string(), "commonName": string(), "duration": string(),
    "renewBefore": string(), "renewBeforePercentage": INTEGER, "dnsNames": STRINGS, "ipAddresses": STRINGS,
    "uris": STRINGS, "otherNames": array(OPEN), "emailAddresses": STRINGS, "secretName": string(),
    "secretTemplate": obj({"annotations": STRING_MAP, "labels": STRING_MAP}), "keystores": OPEN,
    "issuerRef": obj({"name": string(), "kind": string(), "group": string()}, ("name",)),
    "isCA": BOOLEAN, "usages": array(string(KEY_USAGES)),
    "privateKey": obj({"rotationPolicy": string(("Never", "Always")), "encoding": string(("PKCS1", "PKCS8")),
                       "algorithm": string(("RSA", "ECDSA", "Ed25519")), "size": INTEGER}),
    "signatureAlgorithm": string(), "encodeUsagesInRequest": BOOLEAN, "revisionHistoryLimit": INTEGER,
    "additionalOutputFormats": array(OPEN), "nameConstraints": OPEN,
}, ("issuerRef", "secretName")))

ISSUER = crd("cert-manager.io", "v1", "Issuer", "issuers", obj({
    "acme": OPEN, "vault": OPEN, "venafi": OPEN,
    "ca": obj({"secretName": string(), "crlDistributionPoints": STRINGS, "issuingCertificateURLs": STRINGS,
               "ocspServers": STRINGS}, ("secretName",)),
    "selfSigned": obj({"crlDistributionPoints": STRINGS}),
}))

# --- monitoring.coreos.com/v1 ------------------------------------------------------------------------------

RULE = obj({"record": string(), "alert": string(), "expr": INT_OR_STRING, "for": string(),
            "keep_firing_for": string(), "labels": STRING_MAP, "annotations": STRING_MAP}, ("expr",))
PROMETHEUS_RULE = crd("monitoring.coreos.com", "v1", "PrometheusRule", "prometheusrules", obj({
    "groups": array(obj({"name": string(), "labels": STRING_MAP, "interval": string(), "query_offset": string(),
                         "limit": INTEGER, "partial_response_strategy": string(), "rules": array(RULE)},
                        ("name",))),
}))

NAMESPACE_SELECTOR = obj({"any": BOOLEAN, "matchNames": STRINGS})
# The fields an Endpoint and a PodMetricsEndpoint share (prometheus-operator's common scrape settings).
SCRAPE_ENDPOINT: dict[str, Schema] = {
    "path": string(), "scheme": string(("http", "https")), "params": {"type": "object", "additionalProperties":
                                                                      STRINGS},
    "interval": string(), "scrapeTimeout": string(), "tlsConfig": OPEN, "bearerTokenSecret": OPEN,
    "authorization": OPEN, "honorLabels": BOOLEAN, "honorTimestamps": BOOLEAN,
    "trackTimestampsStaleness": BOOLEAN, "basicAuth": OPEN, "oauth2": OPEN,
    "metricRelabelings": array(OPEN), "relabelings": array(OPEN), "proxyUrl": string(),
    "noProxy": string(), "proxyFromEnvironment": BOOLEAN, "proxyConnectHeader": OPEN,
    "followRedirects": BOOLEAN, "enableHttp2": BOOLEAN, "filterRunning": BOOLEAN,
}
MONITOR_COMMON: dict[str, Schema] = {
    "jobLabel": string(), "podTargetLabels": STRINGS, "selector": LABEL_SELECTOR, "selectorMechanism": string(),
    "namespaceSelector": NAMESPACE_SELECTOR, "sampleLimit": INTEGER, "targetLimit": INTEGER,
    "scrapeProtocols": STRINGS, "fallbackScrapeProtocol": string(), "labelLimit": INTEGER,
    "labelNameLengthLimit": INTEGER, "labelValueLengthLimit": INTEGER, "scrapeClassicHistograms": BOOLEAN,
    "nativeHistogramBucketLimit": INTEGER, "nativeHistogramMinBucketFactor": INT_OR_STRING,
    "keepDroppedTargets": INTEGER, "attachMetadata": OPEN, "scrapeClass": string(), "bodySizeLimit": string(),
}
SERVICE_MONITOR = crd("monitoring.coreos.com", "v1", "ServiceMonitor", "servicemonitors", obj({
    **MONITOR_COMMON, "targetLabels": STRINGS,
    "endpoints": array(obj({**SCRAPE_ENDPOINT, "port": string(), "targetPort": INT_OR_STRING,
                            "bearerTokenFile": string()})),
}, ("selector",)))
POD_MONITOR = crd("monitoring.coreos.com", "v1", "PodMonitor", "podmonitors", obj({
    **MONITOR_COMMON,
    "podMetricsEndpoints": array(obj({**SCRAPE_ENDPOINT, "port": string(), "portNumber": INTEGER,
                                      "targetPort": INT_OR_STRING})),
}))

# --- helm.toolkit.fluxcd.io/v2, source.toolkit.fluxcd.io/v1 -------------------------------------------------

SOURCE_REFERENCE = obj({"apiVersion": string(), "kind": string(("HelmRepository", "GitRepository", "Bucket")),
                        "name": string(), "namespace": string()}, ("kind", "name"))
HELM_RELEASE = crd("helm.toolkit.fluxcd.io", "v2", "HelmRelease", "helmreleases", obj({
    "chart": obj({"metadata": obj({"labels": STRING_MAP, "annotations": STRING_MAP}),
                  "spec": obj({"chart": string(), "version": string(), "sourceRef": SOURCE_REFERENCE,
                               "interval": string(), "reconcileStrategy": string(("ChartVersion", "Revision")),
                               "valuesFiles": STRINGS, "ignoreMissingValuesFiles": BOOLEAN, "verify": OPEN},
                              ("chart", "sourceRef"))}, ("spec",)),
    "chartRef": OPEN, "interval": string(), "kubeConfig": OPEN, "suspend": BOOLEAN, "releaseName": string(),
    "targetNamespace": string(), "storageNamespace": string(), "dependsOn": array(OPEN), "timeout": string(),
    "maxHistory": INTEGER, "serviceAccountName": string(), "persistentClient": BOOLEAN,
    "driftDetection": OPEN, "install": OPEN, "upgrade": OPEN, "test": OPEN, "rollback": OPEN, "uninstall": OPEN,
    "valuesFrom": array(obj({"kind": string(("Secret", "ConfigMap")), "name": string(), "valuesKey": string(),
                             "targetPath": string(), "optional": BOOLEAN}, ("kind", "name"))),
    "values": OPEN, "postRenderers": array(OPEN), "commonMetadata": OPEN,
}, ("interval",)))
HELM_REPOSITORY = crd("source.toolkit.fluxcd.io", "v1", "HelmRepository", "helmrepositories", obj({
    "url": string(), "secretRef": LOCAL_REFERENCE, "certSecretRef": LOCAL_REFERENCE, "passCredentials": BOOLEAN,
    "insecure": BOOLEAN, "interval": string(), "timeout": string(), "suspend": BOOLEAN, "accessFrom": OPEN,
    "type": string(("default", "oci")), "provider": string(("generic", "aws", "azure", "gcp")),
}, ("url",)))

# --- nvidia.com/v1 ClusterPolicy --------------------------------------------------------------------------------


def cluster_policy(release: Any) -> Schema:
    """The GPU Operator's ClusterPolicy CRD as far as gpupolicy's table of it goes (policy/hardware/operator.py,
    read from each release's nvidia.com_clusterpolicies.yaml, which the schema's $comment cites): the fields
    gpupolicy writes typed, with the release's enums, defaults and required fields; every object open beside them,
    so the many fields Helm sets that the table does not know are stored as they are (the upstream CRD types them
    all; for ownership and conflicts what matters is that each is a field of its own)."""
    from policy.hardware import operator

    def structural(schema: Any) -> Any:
        if not isinstance(schema, dict):
            return schema
        out = {k: structural(v) if k in ("items", "additionalProperties") else
               {n: structural(s) for n, s in v.items()} if k == "properties" else v
               for k, v in schema.items() if not k.startswith("$")}
        if out.get("type") == "object" and "additionalProperties" not in out:
            out["x-kubernetes-preserve-unknown-fields"] = True
        return out

    root = structural(operator.crd_schema(release))
    return crd("nvidia.com", "v1", "ClusterPolicy", "clusterpolicies", root["properties"]["spec"], scope="Cluster")


ALL: tuple[Schema, ...] = (CERTIFICATE, ISSUER, PROMETHEUS_RULE, SERVICE_MONITOR, POD_MONITOR, HELM_RELEASE,
                           HELM_REPOSITORY)
