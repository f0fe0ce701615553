-- 0012_partitioned_ledger: the ledger tables, partitioned by day (tables.py, as DDL).
CREATE TABLE event_keys (
    tenant_id BIGINT NOT NULL,
    source_id BIGINT NOT NULL,
    key_digest BYTEA NOT NULL,
    event_id BIGINT NOT NULL,
    public_id TEXT NOT NULL,
    expires_at TIMESTAMP WITH TIME ZONE NOT NULL,
    body_sha256 BYTEA NOT NULL,
    response_status INTEGER NOT NULL,
    response_body BYTEA NOT NULL,
    sync BOOLEAN DEFAULT false NOT NULL,
    duplicate_count INTEGER DEFAULT 0 NOT NULL,
    first_duplicate_at TIMESTAMP WITH TIME ZONE,
    last_duplicate_at TIMESTAMP WITH TIME ZONE,
    CONSTRAINT pk_event_keys PRIMARY KEY (tenant_id, source_id, key_digest)
) WITH (fillfactor = 75);
CREATE INDEX ix_event_keys_expires_at ON event_keys (expires_at);
CREATE TABLE events (
    id BIGINT DEFAULT inbox_ledger_id('events_id_seq'::regclass) NOT NULL,
    public_id TEXT NOT NULL,
    tenant_id BIGINT NOT NULL,
    source_id BIGINT NOT NULL,
    key_digest BYTEA,
    event_type TEXT,
    business_key_digest BYTEA,
    ordering_key BYTEA,
    content_type TEXT NOT NULL,
    body BYTEA,
    body_sha256 BYTEA NOT NULL,
    headers JSONB DEFAULT '{}'::jsonb NOT NULL,
    response_status INTEGER NOT NULL,
    response_body BYTEA NOT NULL,
    sync BOOLEAN DEFAULT false NOT NULL,
    state TEXT DEFAULT 'received' NOT NULL,
    attempts INTEGER DEFAULT 0 NOT NULL,
    max_attempts INTEGER DEFAULT 5 NOT NULL,
    replay INTEGER DEFAULT 0 NOT NULL,
    available_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
    lease_owner TEXT,
    lease_expires_at TIMESTAMP WITH TIME ZONE,
    fence BIGINT DEFAULT 0 NOT NULL,
    received_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
    finished_at TIMESTAMP WITH TIME ZONE,
    last_error_class TEXT,
    last_error_message TEXT,
    duplicate_count INTEGER DEFAULT 0 NOT NULL,
    first_duplicate_at TIMESTAMP WITH TIME ZONE,
    last_duplicate_at TIMESTAMP WITH TIME ZONE,
    outcome TEXT,
    decision JSONB,
    duplicate_of BIGINT,
    occurred_at TIMESTAMP WITH TIME ZONE,
    version NUMERIC,
    newer_event_id BIGINT,
    CONSTRAINT pk_events PRIMARY KEY (id),
    CONSTRAINT ck_events_state CHECK (state IN ('received', 'processing', 'completed', 'quarantined')),
    CONSTRAINT fk_events_tenant_id_tenants FOREIGN KEY(tenant_id) REFERENCES tenants (id),
    CONSTRAINT fk_events_source_id_sources FOREIGN KEY(source_id) REFERENCES sources (id)
)
 PARTITION BY RANGE (id);
CREATE INDEX ix_events_business_key ON events (tenant_id, business_key_digest, id);
CREATE INDEX ix_events_due ON events (tenant_id, available_at, id) WHERE state = 'received';
CREATE INDEX ix_events_leases ON events (lease_expires_at) WHERE state = 'processing';
CREATE INDEX ix_events_listing ON events (tenant_id, source_id, state, id);
CREATE INDEX ix_events_ordering ON events (tenant_id, ordering_key, id) WHERE ordering_key IS NOT NULL AND state IN ('received', 'processing');
CREATE INDEX ix_events_public_id ON events (public_id);
CREATE INDEX ix_events_received_at ON events (received_at);
CREATE TABLE steps (
    event_id BIGINT NOT NULL,
    name TEXT NOT NULL,
    result JSONB,
    attempt INTEGER NOT NULL,
    replay INTEGER DEFAULT 0 NOT NULL,
    completed_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
    CONSTRAINT pk_steps PRIMARY KEY (event_id, name),
    CONSTRAINT fk_steps_event_id_events FOREIGN KEY(event_id) REFERENCES events (id) ON DELETE CASCADE
)
 PARTITION BY RANGE (event_id);
CREATE TABLE event_attempts (
    event_id BIGINT NOT NULL,
    id BIGINT DEFAULT nextval('event_attempts_id_seq'::regclass) NOT NULL,
    at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
    attempt INTEGER NOT NULL,
    step TEXT,
    error_class TEXT NOT NULL,
    error_message TEXT,
    traceback TEXT,
    outcome TEXT NOT NULL,
    CONSTRAINT pk_event_attempts PRIMARY KEY (event_id, id),
    CONSTRAINT ck_event_attempts_outcome CHECK (outcome IN ('retry', 'quarantined')),
    CONSTRAINT fk_event_attempts_event_id_events FOREIGN KEY(event_id) REFERENCES events (id) ON DELETE CASCADE
)
 PARTITION BY RANGE (event_id);
CREATE INDEX ix_event_attempts_at ON event_attempts (at);
CREATE TABLE deliveries (
    id BIGINT DEFAULT inbox_ledger_id('deliveries_id_seq'::regclass) NOT NULL,
    public_id TEXT NOT NULL,
    tenant_id BIGINT NOT NULL,
    endpoint_id BIGINT NOT NULL,
    event_id BIGINT,
    event_type TEXT NOT NULL,
    body BYTEA NOT NULL,
    state TEXT DEFAULT 'pending' NOT NULL,
    replay INTEGER DEFAULT 0 NOT NULL,
    attempts INTEGER DEFAULT 0 NOT NULL,
    available_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
    lease_owner TEXT,
    lease_expires_at TIMESTAMP WITH TIME ZONE,
    fence BIGINT DEFAULT 0 NOT NULL,
    last_status INTEGER,
    last_error TEXT,
    created_at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
    finished_at TIMESTAMP WITH TIME ZONE,
    CONSTRAINT pk_deliveries PRIMARY KEY (id),
    CONSTRAINT ck_deliveries_state CHECK (state IN ('pending', 'sending', 'delivered', 'failed')),
    CONSTRAINT fk_deliveries_tenant_id_tenants FOREIGN KEY(tenant_id) REFERENCES tenants (id),
    CONSTRAINT fk_deliveries_endpoint_id_endpoints FOREIGN KEY(endpoint_id) REFERENCES endpoints (id)
)
 PARTITION BY RANGE (id);
CREATE INDEX ix_deliveries_due ON deliveries (endpoint_id, available_at, id) WHERE state = 'pending';
CREATE INDEX ix_deliveries_event_id ON deliveries (event_id);
CREATE INDEX ix_deliveries_listing ON deliveries (tenant_id, state, id);
CREATE INDEX ix_deliveries_public_id ON deliveries (public_id);
CREATE INDEX ix_deliveries_sending ON deliveries (endpoint_id, lease_expires_at) WHERE state = 'sending';
CREATE TABLE delivery_attempts (
    delivery_id BIGINT NOT NULL,
    id BIGINT DEFAULT nextval('delivery_attempts_id_seq'::regclass) NOT NULL,
    at TIMESTAMP WITH TIME ZONE DEFAULT now() NOT NULL,
    status INTEGER,
    error_class TEXT,
    latency_ms INTEGER NOT NULL,
    excerpt TEXT,
    CONSTRAINT pk_delivery_attempts PRIMARY KEY (delivery_id, id),
    CONSTRAINT fk_delivery_attempts_delivery_id_deliveries FOREIGN KEY(delivery_id) REFERENCES deliveries (id) ON DELETE CASCADE
)
 PARTITION BY RANGE (delivery_id);
