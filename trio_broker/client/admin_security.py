"""The admin client's security calls (mixed into `Admin`): ACLs, SCRAM credentials and
client quotas, sent to any broker (every broker of a cluster serves them) except the
credential changes, which go to the controller as Kafka's admin client sends them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trio_broker.client.admin_types import (
    SCRAM_MECHANISMS,
    AclBinding,
    AclBindingFilter,
    ClientQuotaEntity,
    ClientQuotaFilterComponent,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
    check_errors,
    error_with,
)
from trio_broker.errors import KafkaError

_check = check_errors
_error = error_with
_DEFAULT_TIMEOUT_MS = 30_000


def _acl_filter_fields(f: AclBindingFilter) -> dict[str, Any]:
    """An ACL filter as DescribeAcls and DeleteAcls both carry it."""
    return {
        "resource_type_filter": f.resource_type,
        "resource_name_filter": f.resource_name,
        "pattern_type_filter": f.pattern_type,
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": f.operation,
        "permission_type": f.permission_type,
    }


class SecurityCalls:
    """Admin's security calls; `Admin` provides `client`, `metadata` and `_controller`."""

    client: Any
    metadata: Any

    async def create_acls(self, bindings: Iterable[AclBinding]) -> None:
        """CreateAcls. Adding a binding that exists already is not an error (as Kafka)."""
        from trio_broker.protocol._generated.create_acls_request import (
            AclCreation,
            CreateAclsRequest,
        )

        bindings = list(bindings)
        if not bindings:
            return
        request = CreateAclsRequest(
            creations=[
                AclCreation(
                    resource_type=b.resource_type,
                    resource_name=b.resource_name,
                    resource_pattern_type=b.pattern_type,
                    principal=b.principal,
                    host=b.host,
                    operation=b.operation,
                    permission_type=b.permission_type,
                )
                for b in bindings
            ]
        )
        response = await self.client.send(self.client.least_loaded_node(), request)
        errors = {
            b: _error(r.error_code, r.error_message, str(b))
            for b, r in zip(bindings, response.results, strict=True)
            if r.error_code
        }
        _check("CreateAcls", errors)

    async def describe_acls(self, acl_filter: AclBindingFilter | None = None) -> list[AclBinding]:
        """DescribeAcls: the bindings matching `acl_filter` (every binding when None)."""
        from trio_broker.protocol._generated.describe_acls_request import DescribeAclsRequest

        f = acl_filter or AclBindingFilter()
        request = DescribeAclsRequest(**_acl_filter_fields(f))
        response = await self.client.send(self.client.least_loaded_node(), request)
        if response.error_code:
            _check("DescribeAcls", {f: _error(response.error_code, response.error_message, str(f))})
        return [
            AclBinding(
                resource_type=r.resource_type,
                resource_name=r.resource_name,
                pattern_type=r.pattern_type,
                principal=a.principal,
                host=a.host,
                operation=a.operation,
                permission_type=a.permission_type,
            )
            for r in response.resources
            for a in r.acls
        ]

    async def delete_acls(
        self, filters: Iterable[AclBindingFilter]
    ) -> dict[AclBindingFilter, list[AclBinding]]:
        """DeleteAcls: per filter the bindings it matched, which are gone now."""
        from trio_broker.protocol._generated.delete_acls_request import (
            DeleteAclsFilter,
            DeleteAclsRequest,
        )

        filters = list(dict.fromkeys(filters))
        if not filters:
            return {}
        request = DeleteAclsRequest(
            filters=[DeleteAclsFilter(**_acl_filter_fields(f)) for f in filters]
        )
        response = await self.client.send(self.client.least_loaded_node(), request)
        results: dict[AclBindingFilter, list[AclBinding]] = {}
        errors: dict[Any, KafkaError] = {}
        for f, r in zip(filters, response.filter_results, strict=True):
            if r.error_code:
                errors[f] = _error(r.error_code, r.error_message, str(f))
                continue
            results[f] = []
            for m in r.matching_acls:
                binding = AclBinding(
                    resource_type=m.resource_type,
                    resource_name=m.resource_name,
                    pattern_type=m.pattern_type,
                    principal=m.principal,
                    host=m.host,
                    operation=m.operation,
                    permission_type=m.permission_type,
                )
                if m.error_code:
                    errors[binding] = _error(m.error_code, m.error_message, str(binding))
                else:
                    results[f].append(binding)
        _check("DeleteAcls", errors, results)
        return results

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None
    ) -> dict[str, list[tuple[str, int]]]:
        """DescribeUserScramCredentials: per user [(mechanism, iterations)], for `users` or
        every user with a credential. Salts and keys never leave the broker."""
        from trio_broker.protocol._generated.describe_user_scram_credentials_request import (
            DescribeUserScramCredentialsRequest,
            UserName,
        )

        wanted = None if users is None else [UserName(name=u) for u in users]
        request = DescribeUserScramCredentialsRequest(users=wanted)
        response = await self.client.send(self.client.least_loaded_node(), request)
        if response.error_code:
            raise _error(
                response.error_code, response.error_message, "DescribeUserScramCredentials"
            )
        names = {v: k for k, v in SCRAM_MECHANISMS.items()}
        results, errors = {}, {}
        for r in response.results:
            if r.error_code:
                errors[r.user] = _error(r.error_code, r.error_message, f"user {r.user!r}")
                continue
            results[r.user] = [
                (names.get(c.mechanism, f"UNKNOWN({c.mechanism})"), c.iterations)
                for c in r.credential_infos
            ]
        _check("DescribeUserScramCredentials", errors, results)
        return results

    async def alter_user_scram_credentials(
        self,
        upsertions: Iterable[UserScramCredentialUpsertion] = (),
        deletions: Iterable[UserScramCredentialDeletion] = (),
    ) -> None:
        """AlterUserScramCredentials, on the controller (as Kafka's admin sends it). Each
        password is salted and hashed here, PBKDF2-HMAC with the mechanism's hash over
        `iterations` (KIP-554): the broker sees only the salted password."""
        import hashlib
        import secrets

        from trio_broker.protocol._generated.alter_user_scram_credentials_request import (
            AlterUserScramCredentialsRequest,
            ScramCredentialDeletion,
            ScramCredentialUpsertion,
        )

        hashes = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
        upserts = []
        for u in upsertions:
            salt = u.salt if u.salt is not None else secrets.token_bytes(32)
            password = u.password.encode() if isinstance(u.password, str) else u.password
            upserts.append(
                ScramCredentialUpsertion(
                    name=u.user,
                    mechanism=SCRAM_MECHANISMS[u.mechanism],
                    iterations=u.iterations,
                    salt=salt,
                    salted_password=hashlib.pbkdf2_hmac(
                        hashes[u.mechanism], password, salt, u.iterations
                    ),
                )
            )
        deletes = [
            ScramCredentialDeletion(name=d.user, mechanism=SCRAM_MECHANISMS[d.mechanism])
            for d in deletions
        ]
        if not upserts and not deletes:
            return
        request = AlterUserScramCredentialsRequest(deletions=deletes, upsertions=upserts)
        response = await self.client.send(await self._controller(), request)
        errors = {
            r.user: _error(r.error_code, r.error_message, f"user {r.user!r}")
            for r in response.results
            if r.error_code
        }
        _check("AlterUserScramCredentials", errors)

    async def describe_client_quotas(
        self,
        components: Iterable[ClientQuotaFilterComponent] | Mapping[str, str | None] = (),
        *,
        strict: bool = False,
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        """DescribeClientQuotas: the entities matching every component, with their quota
        values. `components` as {entity type: name, or None for the default entity} is
        short for exact and default matches; no component matches every entity. `strict`
        leaves out entities with entity types the filter does not name."""
        from trio_broker.protocol._generated.describe_client_quotas_request import (
            ComponentData,
            DescribeClientQuotasRequest,
        )

        if isinstance(components, Mapping):
            components = [
                ClientQuotaFilterComponent.of_default_entity(t)
                if n is None
                else ClientQuotaFilterComponent.of_entity(t, n)
                for t, n in components.items()
            ]
        request = DescribeClientQuotasRequest(
            components=[
                ComponentData(entity_type=c.entity_type, match_type=c.match_type, match=c.match)
                for c in components
            ],
            strict=strict,
        )
        response = await self.client.send(self.client.least_loaded_node(), request)
        if response.error_code:
            raise _error(response.error_code, response.error_message, "DescribeClientQuotas")
        return {
            ClientQuotaEntity([(e.entity_type, e.entity_name) for e in entry.entity]): {
                v.key: v.value for v in entry.values
            }
            for entry in response.entries or ()
        }

    async def alter_client_quotas(
        self,
        entries: Mapping[ClientQuotaEntity, Mapping[str, float | None]],
        *,
        validate_only: bool = False,
    ) -> None:
        """AlterClientQuotas: per entity, quota keys (producer_byte_rate,
        consumer_byte_rate, request_percentage) to set to a value, or None to remove.
        An entity may also be given as its ((type, name), ...) pairs."""
        from trio_broker.protocol._generated.alter_client_quotas_request import (
            AlterClientQuotasRequest,
            EntityData,
            EntryData,
            OpData,
        )

        wanted = {ClientQuotaEntity.of(e): ops for e, ops in entries.items()}
        if not wanted:
            return
        request = AlterClientQuotasRequest(
            entries=[
                EntryData(
                    entity=[EntityData(entity_type=t, entity_name=n) for t, n in entity.entries],
                    ops=[
                        OpData(key=k, value=0.0 if v is None else float(v), remove=v is None)
                        for k, v in ops.items()
                    ],
                )
                for entity, ops in wanted.items()
            ],
            validate_only=validate_only,
        )
        response = await self.client.send(self.client.least_loaded_node(), request)
        errors = {}
        for r in response.entries:
            if r.error_code:
                entity = ClientQuotaEntity([(e.entity_type, e.entity_name) for e in r.entity])
                errors[entity] = _error(r.error_code, r.error_message, f"quotas of {entity}")
        _check("AlterClientQuotas", errors)
