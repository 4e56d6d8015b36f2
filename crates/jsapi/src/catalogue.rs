//! The JetStream error catalogue: every `code` / `err_code` / description
//! nats-server can answer with. Generated once from nats-server's
//! `server/errors.json` (the wire values clients match on); descriptions
//! keep their `{placeholder}`s, filled by [`ErrorDef::with`].

use super::error::ErrorDef;

/// One constant per nats-server error identifier, named after it.
pub struct E;

#[rustfmt::skip]
impl E {
    /// JSAccountResourcesExceededErr
    pub const ACCOUNT_RESOURCES_EXCEEDED: ErrorDef = ErrorDef::new(400, 10002, "resource limits exceeded for account");
    /// JSBadRequestErr
    pub const BAD_REQUEST: ErrorDef = ErrorDef::new(400, 10003, "bad request");
    /// JSClusterIncompleteErr
    pub const CLUSTER_INCOMPLETE: ErrorDef = ErrorDef::new(503, 10004, "incomplete results");
    /// JSClusterNoPeersErrF
    pub const CLUSTER_NO_PEERS: ErrorDef = ErrorDef::new(400, 10005, "{err}");
    /// JSClusterNotActiveErr
    pub const CLUSTER_NOT_ACTIVE: ErrorDef = ErrorDef::new(500, 10006, "JetStream not in clustered mode");
    /// JSClusterNotAssignedErr
    pub const CLUSTER_NOT_ASSIGNED: ErrorDef = ErrorDef::new(500, 10007, "JetStream cluster not assigned to this server");
    /// JSClusterNotAvailErr
    pub const CLUSTER_NOT_AVAIL: ErrorDef = ErrorDef::new(503, 10008, "JetStream system temporarily unavailable");
    /// JSClusterNotLeaderErr
    pub const CLUSTER_NOT_LEADER: ErrorDef = ErrorDef::new(500, 10009, "JetStream cluster can not handle request");
    /// JSClusterRequiredErr
    pub const CLUSTER_REQUIRED: ErrorDef = ErrorDef::new(503, 10010, "JetStream clustering support required");
    /// JSClusterTagsErr
    pub const CLUSTER_TAGS: ErrorDef = ErrorDef::new(400, 10011, "tags placement not supported for operation");
    /// JSConsumerCreateErrF
    pub const CONSUMER_CREATE: ErrorDef = ErrorDef::new(500, 10012, "{err}");
    /// JSConsumerNameExistErr
    pub const CONSUMER_NAME_EXIST: ErrorDef = ErrorDef::new(400, 10013, "consumer name already in use");
    /// JSConsumerNotFoundErr
    pub const CONSUMER_NOT_FOUND: ErrorDef = ErrorDef::new(404, 10014, "consumer not found");
    /// JSSnapshotDeliverSubjectInvalidErr
    pub const SNAPSHOT_DELIVER_SUBJECT_INVALID: ErrorDef = ErrorDef::new(400, 10015, "deliver subject not valid");
    /// JSConsumerDurableNameNotInSubjectErr
    pub const CONSUMER_DURABLE_NAME_NOT_IN_SUBJECT: ErrorDef = ErrorDef::new(400, 10016, "consumer expected to be durable but no durable name set in subject");
    /// JSConsumerDurableNameNotMatchSubjectErr
    pub const CONSUMER_DURABLE_NAME_NOT_MATCH_SUBJECT: ErrorDef = ErrorDef::new(400, 10017, "consumer name in subject does not match durable name in request");
    /// JSConsumerDurableNameNotSetErr
    pub const CONSUMER_DURABLE_NAME_NOT_SET: ErrorDef = ErrorDef::new(400, 10018, "consumer expected to be durable but a durable name was not set");
    /// JSConsumerEphemeralWithDurableInSubjectErr
    pub const CONSUMER_EPHEMERAL_WITH_DURABLE_IN_SUBJECT: ErrorDef = ErrorDef::new(400, 10019, "consumer expected to be ephemeral but detected a durable name set in subject");
    /// JSConsumerEphemeralWithDurableNameErr
    pub const CONSUMER_EPHEMERAL_WITH_DURABLE_NAME: ErrorDef = ErrorDef::new(400, 10020, "consumer expected to be ephemeral but a durable name was set in request");
    /// JSStreamExternalApiOverlapErrF
    pub const STREAM_EXTERNAL_API_OVERLAP: ErrorDef = ErrorDef::new(400, 10021, "stream external api prefix {prefix} must not overlap with {subject}");
    /// JSStreamExternalDelPrefixOverlapsErrF
    pub const STREAM_EXTERNAL_DEL_PREFIX_OVERLAPS: ErrorDef = ErrorDef::new(400, 10022, "stream external delivery prefix {prefix} overlaps with stream subject {subject}");
    /// JSInsufficientResourcesErr
    pub const INSUFFICIENT_RESOURCES: ErrorDef = ErrorDef::new(503, 10023, "insufficient resources");
    /// JSStreamInvalidExternalDeliverySubjErrF
    pub const STREAM_INVALID_EXTERNAL_DELIVERY_SUBJ: ErrorDef = ErrorDef::new(400, 10024, "stream external delivery prefix {prefix} must not contain wildcards");
    /// JSInvalidJSONErr
    pub const INVALID_JSON: ErrorDef = ErrorDef::new(400, 10025, "invalid JSON: {err}");
    /// JSMaximumConsumersLimitErr
    pub const MAXIMUM_CONSUMERS_LIMIT: ErrorDef = ErrorDef::new(400, 10026, "maximum consumers limit reached");
    /// JSMaximumStreamsLimitErr
    pub const MAXIMUM_STREAMS_LIMIT: ErrorDef = ErrorDef::new(400, 10027, "maximum number of streams reached");
    /// JSMemoryResourcesExceededErr
    pub const MEMORY_RESOURCES_EXCEEDED: ErrorDef = ErrorDef::new(500, 10028, "insufficient memory resources available");
    /// JSMirrorConsumerSetupFailedErrF
    pub const MIRROR_CONSUMER_SETUP_FAILED: ErrorDef = ErrorDef::new(500, 10029, "{err}");
    /// JSMirrorMaxMessageSizeTooBigErr
    pub const MIRROR_MAX_MESSAGE_SIZE_TOO_BIG: ErrorDef = ErrorDef::new(400, 10030, "stream mirror must have max message size >= source");
    /// JSMirrorWithSourcesErr
    pub const MIRROR_WITH_SOURCES: ErrorDef = ErrorDef::new(400, 10031, "stream mirrors can not also contain other sources");
    /// JSMirrorWithStartSeqAndTimeErr
    pub const MIRROR_WITH_START_SEQ_AND_TIME: ErrorDef = ErrorDef::new(400, 10032, "stream mirrors can not have both start seq and start time configured");
    /// JSMirrorWithSubjectFiltersErr
    pub const MIRROR_WITH_SUBJECT_FILTERS: ErrorDef = ErrorDef::new(400, 10033, "stream mirrors can not contain filtered subjects");
    /// JSMirrorWithSubjectsErr
    pub const MIRROR_WITH_SUBJECTS: ErrorDef = ErrorDef::new(400, 10034, "stream mirrors can not contain subjects");
    /// JSNoAccountErr
    pub const NO_ACCOUNT: ErrorDef = ErrorDef::new(503, 10035, "account not found");
    /// JSClusterUnSupportFeatureErr
    pub const CLUSTER_UN_SUPPORT_FEATURE: ErrorDef = ErrorDef::new(503, 10036, "not currently supported in clustered mode");
    /// JSNoMessageFoundErr
    pub const NO_MESSAGE_FOUND: ErrorDef = ErrorDef::new(404, 10037, "no message found");
    /// JSNotEmptyRequestErr
    pub const NOT_EMPTY_REQUEST: ErrorDef = ErrorDef::new(400, 10038, "expected an empty request payload");
    /// JSNotEnabledForAccountErr
    pub const NOT_ENABLED_FOR_ACCOUNT: ErrorDef = ErrorDef::new(503, 10039, "JetStream not enabled for account");
    /// JSClusterPeerNotMemberErr
    pub const CLUSTER_PEER_NOT_MEMBER: ErrorDef = ErrorDef::new(400, 10040, "peer not a member");
    /// JSRaftGeneralErrF
    pub const RAFT_GENERAL: ErrorDef = ErrorDef::new(500, 10041, "{err}");
    /// JSRestoreSubscribeFailedErrF
    pub const RESTORE_SUBSCRIBE_FAILED: ErrorDef = ErrorDef::new(500, 10042, "JetStream unable to subscribe to restore snapshot {subject}: {err}");
    /// JSSequenceNotFoundErrF
    pub const SEQUENCE_NOT_FOUND: ErrorDef = ErrorDef::new(400, 10043, "sequence {seq} not found");
    /// JSClusterServerNotMemberErr
    pub const CLUSTER_SERVER_NOT_MEMBER: ErrorDef = ErrorDef::new(400, 10044, "server is not a member of the cluster");
    /// JSSourceConsumerSetupFailedErrF
    pub const SOURCE_CONSUMER_SETUP_FAILED: ErrorDef = ErrorDef::new(500, 10045, "{err}");
    /// JSSourceMaxMessageSizeTooBigErr
    pub const SOURCE_MAX_MESSAGE_SIZE_TOO_BIG: ErrorDef = ErrorDef::new(400, 10046, "stream source must have max message size >= target");
    /// JSStorageResourcesExceededErr
    pub const STORAGE_RESOURCES_EXCEEDED: ErrorDef = ErrorDef::new(500, 10047, "insufficient storage resources available");
    /// JSStreamAssignmentErrF
    pub const STREAM_ASSIGNMENT: ErrorDef = ErrorDef::new(500, 10048, "{err}");
    /// JSStreamCreateErrF
    pub const STREAM_CREATE: ErrorDef = ErrorDef::new(500, 10049, "{err}");
    /// JSStreamDeleteErrF
    pub const STREAM_DELETE: ErrorDef = ErrorDef::new(500, 10050, "{err}");
    /// JSStreamGeneralErrorF
    pub const STREAM_GENERAL_ERROR: ErrorDef = ErrorDef::new(500, 10051, "{err}");
    /// JSStreamInvalidConfigF
    pub const STREAM_INVALID_CONFIG: ErrorDef = ErrorDef::new(500, 10052, "{err}");
    /// JSStreamLimitsErrF
    pub const STREAM_LIMITS: ErrorDef = ErrorDef::new(500, 10053, "{err}");
    /// JSStreamMessageExceedsMaximumErr
    pub const STREAM_MESSAGE_EXCEEDS_MAXIMUM: ErrorDef = ErrorDef::new(400, 10054, "message size exceeds maximum allowed");
    /// JSStreamMirrorNotUpdatableErr
    pub const STREAM_MIRROR_NOT_UPDATABLE: ErrorDef = ErrorDef::new(400, 10055, "stream mirror configuration can not be updated");
    /// JSStreamMismatchErr
    pub const STREAM_MISMATCH: ErrorDef = ErrorDef::new(400, 10056, "stream name in subject does not match request");
    /// JSStreamMsgDeleteFailedF
    pub const STREAM_MSG_DELETE_FAILED: ErrorDef = ErrorDef::new(500, 10057, "{err}");
    /// JSStreamNameExistErr
    pub const STREAM_NAME_EXIST: ErrorDef = ErrorDef::new(400, 10058, "stream name already in use with a different configuration");
    /// JSStreamNotFoundErr
    pub const STREAM_NOT_FOUND: ErrorDef = ErrorDef::new(404, 10059, "stream not found");
    /// JSStreamNotMatchErr
    pub const STREAM_NOT_MATCH: ErrorDef = ErrorDef::new(400, 10060, "expected stream does not match");
    /// JSStreamReplicasNotUpdatableErr
    pub const STREAM_REPLICAS_NOT_UPDATABLE: ErrorDef = ErrorDef::new(400, 10061, "Replicas configuration can not be updated");
    /// JSStreamRestoreErrF
    pub const STREAM_RESTORE: ErrorDef = ErrorDef::new(500, 10062, "restore failed: {err}");
    /// JSStreamSequenceNotMatchErr
    pub const STREAM_SEQUENCE_NOT_MATCH: ErrorDef = ErrorDef::new(503, 10063, "expected stream sequence does not match");
    /// JSStreamSnapshotErrF
    pub const STREAM_SNAPSHOT: ErrorDef = ErrorDef::new(500, 10064, "snapshot failed: {err}");
    /// JSStreamSubjectOverlapErr
    pub const STREAM_SUBJECT_OVERLAP: ErrorDef = ErrorDef::new(400, 10065, "subjects overlap with an existing stream");
    /// JSStreamTemplateCreateErrF
    pub const STREAM_TEMPLATE_CREATE: ErrorDef = ErrorDef::new(500, 10066, "{err}");
    /// JSStreamTemplateDeleteErrF
    pub const STREAM_TEMPLATE_DELETE: ErrorDef = ErrorDef::new(500, 10067, "{err}");
    /// JSStreamTemplateNotFoundErr
    pub const STREAM_TEMPLATE_NOT_FOUND: ErrorDef = ErrorDef::new(404, 10068, "template not found");
    /// JSStreamUpdateErrF
    pub const STREAM_UPDATE: ErrorDef = ErrorDef::new(500, 10069, "{err}");
    /// JSStreamWrongLastMsgIDErrF
    pub const STREAM_WRONG_LAST_MSG_ID: ErrorDef = ErrorDef::new(400, 10070, "wrong last msg ID: {id}");
    /// JSStreamWrongLastSequenceErrF
    pub const STREAM_WRONG_LAST_SEQUENCE: ErrorDef = ErrorDef::new(400, 10071, "wrong last sequence: {seq}");
    /// JSTempStorageFailedErr
    pub const TEMP_STORAGE_FAILED: ErrorDef = ErrorDef::new(500, 10072, "JetStream unable to open temp storage for restore");
    /// JSTemplateNameNotMatchSubjectErr
    pub const TEMPLATE_NAME_NOT_MATCH_SUBJECT: ErrorDef = ErrorDef::new(400, 10073, "template name in subject does not match request");
    /// JSStreamReplicasNotSupportedErr
    pub const STREAM_REPLICAS_NOT_SUPPORTED: ErrorDef = ErrorDef::new(500, 10074, "replicas > 1 not supported in non-clustered mode");
    /// JSPeerRemapErr
    pub const PEER_REMAP: ErrorDef = ErrorDef::new(503, 10075, "peer remap failed");
    /// JSNotEnabledErr
    pub const NOT_ENABLED: ErrorDef = ErrorDef::new(503, 10076, "JetStream not enabled");
    /// JSStreamStoreFailedF
    pub const STREAM_STORE_FAILED: ErrorDef = ErrorDef::new(503, 10077, "{err}");
    /// JSConsumerConfigRequiredErr
    pub const CONSUMER_CONFIG_REQUIRED: ErrorDef = ErrorDef::new(400, 10078, "consumer config required");
    /// JSConsumerDeliverToWildcardsErr
    pub const CONSUMER_DELIVER_TO_WILDCARDS: ErrorDef = ErrorDef::new(400, 10079, "consumer deliver subject has wildcards");
    /// JSConsumerPushMaxWaitingErr
    pub const CONSUMER_PUSH_MAX_WAITING: ErrorDef = ErrorDef::new(400, 10080, "consumer in push mode can not set max waiting");
    /// JSConsumerDeliverCycleErr
    pub const CONSUMER_DELIVER_CYCLE: ErrorDef = ErrorDef::new(400, 10081, "consumer deliver subject forms a cycle");
    /// JSConsumerMaxPendingAckPolicyRequiredErr
    pub const CONSUMER_MAX_PENDING_ACK_POLICY_REQUIRED: ErrorDef = ErrorDef::new(400, 10082, "consumer requires ack policy for max ack pending");
    /// JSConsumerSmallHeartbeatErr
    pub const CONSUMER_SMALL_HEARTBEAT: ErrorDef = ErrorDef::new(400, 10083, "consumer idle heartbeat needs to be >= 100ms");
    /// JSConsumerPullRequiresAckErr
    pub const CONSUMER_PULL_REQUIRES_ACK: ErrorDef = ErrorDef::new(400, 10084, "consumer in pull mode requires explicit ack policy on workqueue stream");
    /// JSConsumerPullNotDurableErr
    pub const CONSUMER_PULL_NOT_DURABLE: ErrorDef = ErrorDef::new(400, 10085, "consumer in pull mode requires a durable name");
    /// JSConsumerPullWithRateLimitErr
    pub const CONSUMER_PULL_WITH_RATE_LIMIT: ErrorDef = ErrorDef::new(400, 10086, "consumer in pull mode can not have rate limit set");
    /// JSConsumerMaxWaitingNegativeErr
    pub const CONSUMER_MAX_WAITING_NEGATIVE: ErrorDef = ErrorDef::new(400, 10087, "consumer max waiting needs to be positive");
    /// JSConsumerHBRequiresPushErr
    pub const CONSUMER_HB_REQUIRES_PUSH: ErrorDef = ErrorDef::new(400, 10088, "consumer idle heartbeat requires a push based consumer");
    /// JSConsumerFCRequiresPushErr
    pub const CONSUMER_FC_REQUIRES_PUSH: ErrorDef = ErrorDef::new(400, 10089, "consumer flow control requires a push based consumer");
    /// JSConsumerDirectRequiresPushErr
    pub const CONSUMER_DIRECT_REQUIRES_PUSH: ErrorDef = ErrorDef::new(400, 10090, "consumer direct requires a push based consumer");
    /// JSConsumerDirectRequiresEphemeralErr
    pub const CONSUMER_DIRECT_REQUIRES_EPHEMERAL: ErrorDef = ErrorDef::new(400, 10091, "consumer direct requires an ephemeral consumer");
    /// JSConsumerOnMappedErr
    pub const CONSUMER_ON_MAPPED: ErrorDef = ErrorDef::new(400, 10092, "consumer direct on a mapped consumer");
    /// JSConsumerFilterNotSubsetErr
    pub const CONSUMER_FILTER_NOT_SUBSET: ErrorDef = ErrorDef::new(400, 10093, "consumer filter subject is not a valid subset of the interest subjects");
    /// JSConsumerInvalidPolicyErrF
    pub const CONSUMER_INVALID_POLICY: ErrorDef = ErrorDef::new(400, 10094, "{err}");
    /// JSConsumerInvalidSamplingErrF
    pub const CONSUMER_INVALID_SAMPLING: ErrorDef = ErrorDef::new(400, 10095, "failed to parse consumer sampling configuration: {err}");
    /// JSStreamInvalidErr
    pub const STREAM_INVALID: ErrorDef = ErrorDef::new(500, 10096, "stream not valid");
    /// JSStreamHeaderExceedsMaximumErr
    pub const STREAM_HEADER_EXCEEDS_MAXIMUM: ErrorDef = ErrorDef::new(400, 10097, "header size exceeds maximum allowed of 64k");
    /// JSConsumerWQRequiresExplicitAckErr
    pub const CONSUMER_WQ_REQUIRES_EXPLICIT_ACK: ErrorDef = ErrorDef::new(400, 10098, "workqueue stream requires explicit ack");
    /// JSConsumerWQMultipleUnfilteredErr
    pub const CONSUMER_WQ_MULTIPLE_UNFILTERED: ErrorDef = ErrorDef::new(400, 10099, "multiple non-filtered consumers not allowed on workqueue stream");
    /// JSConsumerWQConsumerNotUniqueErr
    pub const CONSUMER_WQ_CONSUMER_NOT_UNIQUE: ErrorDef = ErrorDef::new(400, 10100, "filtered consumer not unique on workqueue stream");
    /// JSConsumerWQConsumerNotDeliverAllErr
    pub const CONSUMER_WQ_CONSUMER_NOT_DELIVER_ALL: ErrorDef = ErrorDef::new(400, 10101, "consumer must be deliver all on workqueue stream");
    /// JSConsumerNameTooLongErrF
    pub const CONSUMER_NAME_TOO_LONG: ErrorDef = ErrorDef::new(400, 10102, "consumer name is too long, maximum allowed is {max}");
    /// JSConsumerBadDurableNameErr
    pub const CONSUMER_BAD_DURABLE_NAME: ErrorDef = ErrorDef::new(400, 10103, "durable name can not contain '.', '*', '>'");
    /// JSConsumerStoreFailedErrF
    pub const CONSUMER_STORE_FAILED: ErrorDef = ErrorDef::new(500, 10104, "error creating store for consumer: {err}");
    /// JSConsumerExistingActiveErr
    pub const CONSUMER_EXISTING_ACTIVE: ErrorDef = ErrorDef::new(400, 10105, "consumer already exists and is still active");
    /// JSConsumerReplacementWithDifferentNameErr
    pub const CONSUMER_REPLACEMENT_WITH_DIFFERENT_NAME: ErrorDef = ErrorDef::new(400, 10106, "consumer replacement durable config not the same");
    /// JSConsumerDescriptionTooLongErrF
    pub const CONSUMER_DESCRIPTION_TOO_LONG: ErrorDef = ErrorDef::new(400, 10107, "consumer description is too long, maximum allowed is {max}");
    /// JSConsumerWithFlowControlNeedsHeartbeats
    pub const CONSUMER_WITH_FLOW_CONTROL_NEEDS_HEARTBEATS: ErrorDef = ErrorDef::new(400, 10108, "consumer with flow control also needs heartbeats");
    /// JSStreamSealedErr
    pub const STREAM_SEALED: ErrorDef = ErrorDef::new(400, 10109, "invalid operation on sealed stream");
    /// JSStreamPurgeFailedF
    pub const STREAM_PURGE_FAILED: ErrorDef = ErrorDef::new(500, 10110, "{err}");
    /// JSStreamRollupFailedF
    pub const STREAM_ROLLUP_FAILED: ErrorDef = ErrorDef::new(500, 10111, "{err}");
    /// JSConsumerInvalidDeliverSubject
    pub const CONSUMER_INVALID_DELIVER_SUBJECT: ErrorDef = ErrorDef::new(400, 10112, "invalid push consumer deliver subject");
    /// JSStreamMaxBytesRequired
    pub const STREAM_MAX_BYTES_REQUIRED: ErrorDef = ErrorDef::new(400, 10113, "account requires a stream config to have max bytes set");
    /// JSConsumerMaxRequestBatchNegativeErr
    pub const CONSUMER_MAX_REQUEST_BATCH_NEGATIVE: ErrorDef = ErrorDef::new(400, 10114, "consumer max request batch needs to be > 0");
    /// JSConsumerMaxRequestExpiresTooSmall
    pub const CONSUMER_MAX_REQUEST_EXPIRES_TOO_SMALL: ErrorDef = ErrorDef::new(400, 10115, "consumer max request expires needs to be >= 1ms");
    /// JSConsumerMaxDeliverBackoffErr
    pub const CONSUMER_MAX_DELIVER_BACKOFF: ErrorDef = ErrorDef::new(400, 10116, "max deliver is required to be > length of backoff values");
    /// JSStreamInfoMaxSubjectsErr
    pub const STREAM_INFO_MAX_SUBJECTS: ErrorDef = ErrorDef::new(500, 10117, "subject details would exceed maximum allowed");
    /// JSStreamOfflineErr
    pub const STREAM_OFFLINE: ErrorDef = ErrorDef::new(500, 10118, "stream is offline");
    /// JSConsumerOfflineErr
    pub const CONSUMER_OFFLINE: ErrorDef = ErrorDef::new(500, 10119, "consumer is offline");
    /// JSNoLimitsErr
    pub const NO_LIMITS: ErrorDef = ErrorDef::new(400, 10120, "no JetStream default or applicable tiered limit present");
    /// JSConsumerMaxPendingAckExcessErrF
    pub const CONSUMER_MAX_PENDING_ACK_EXCESS: ErrorDef = ErrorDef::new(400, 10121, "consumer max ack pending exceeds system limit of {limit}");
    /// JSStreamMaxStreamBytesExceeded
    pub const STREAM_MAX_STREAM_BYTES_EXCEEDED: ErrorDef = ErrorDef::new(400, 10122, "stream max bytes exceeds account limit max stream bytes");
    /// JSStreamMoveAndScaleErr
    pub const STREAM_MOVE_AND_SCALE: ErrorDef = ErrorDef::new(400, 10123, "can not move and scale a stream in a single update");
    /// JSStreamMoveInProgressErr
    pub const STREAM_MOVE_IN_PROGRESS: ErrorDef = ErrorDef::new(400, 10124, "stream move already in progress");
    /// JSConsumerMaxRequestBatchExceededF
    pub const CONSUMER_MAX_REQUEST_BATCH_EXCEEDED: ErrorDef = ErrorDef::new(400, 10125, "consumer max request batch exceeds server limit of {limit}");
    /// JSConsumerReplicasExceedsStream
    pub const CONSUMER_REPLICAS_EXCEEDS_STREAM: ErrorDef = ErrorDef::new(400, 10126, "consumer config replica count exceeds parent stream");
    /// JSConsumerNameContainsPathSeparatorsErr
    pub const CONSUMER_NAME_CONTAINS_PATH_SEPARATORS: ErrorDef = ErrorDef::new(400, 10127, "Consumer name can not contain path separators");
    /// JSStreamNameContainsPathSeparatorsErr
    pub const STREAM_NAME_CONTAINS_PATH_SEPARATORS: ErrorDef = ErrorDef::new(400, 10128, "Stream name can not contain path separators");
    /// JSStreamReconfigureNotInProgressErr
    pub const STREAM_RECONFIGURE_NOT_IN_PROGRESS: ErrorDef = ErrorDef::new(400, 10129, "stream reconfiguration not in progress");
    /// JSStreamNameExistRestoreFailedErr
    pub const STREAM_NAME_EXIST_RESTORE_FAILED: ErrorDef = ErrorDef::new(400, 10130, "stream name already in use, cannot restore");
    /// JSConsumerCreateFilterSubjectMismatchErr
    pub const CONSUMER_CREATE_FILTER_SUBJECT_MISMATCH: ErrorDef = ErrorDef::new(400, 10131, "Consumer create request did not match filtered subject from create subject");
    /// JSConsumerCreateDurableAndNameMismatch
    pub const CONSUMER_CREATE_DURABLE_AND_NAME_MISMATCH: ErrorDef = ErrorDef::new(400, 10132, "Consumer Durable and Name have to be equal if both are provided");
    /// JSReplicasCountCannotBeNegative
    pub const REPLICAS_COUNT_CANNOT_BE_NEGATIVE: ErrorDef = ErrorDef::new(400, 10133, "replicas count cannot be negative");
    /// JSConsumerReplicasShouldMatchStream
    pub const CONSUMER_REPLICAS_SHOULD_MATCH_STREAM: ErrorDef = ErrorDef::new(400, 10134, "consumer config replicas must match interest retention stream's replicas");
    /// JSConsumerMetadataLengthErrF
    pub const CONSUMER_METADATA_LENGTH: ErrorDef = ErrorDef::new(400, 10135, "consumer metadata exceeds maximum size of {limit}");
    /// JSConsumerDuplicateFilterSubjects
    pub const CONSUMER_DUPLICATE_FILTER_SUBJECTS: ErrorDef = ErrorDef::new(400, 10136, "consumer cannot have both FilterSubject and FilterSubjects specified");
    /// JSConsumerMultipleFiltersNotAllowed
    pub const CONSUMER_MULTIPLE_FILTERS_NOT_ALLOWED: ErrorDef = ErrorDef::new(400, 10137, "consumer with multiple subject filters cannot use subject based API");
    /// JSConsumerOverlappingSubjectFilters
    pub const CONSUMER_OVERLAPPING_SUBJECT_FILTERS: ErrorDef = ErrorDef::new(400, 10138, "consumer subject filters cannot overlap");
    /// JSConsumerEmptyFilter
    pub const CONSUMER_EMPTY_FILTER: ErrorDef = ErrorDef::new(400, 10139, "consumer filter in FilterSubjects cannot be empty");
    /// JSSourceDuplicateDetected
    pub const SOURCE_DUPLICATE_DETECTED: ErrorDef = ErrorDef::new(400, 10140, "duplicate source configuration detected");
    /// JSSourceInvalidStreamName
    pub const SOURCE_INVALID_STREAM_NAME: ErrorDef = ErrorDef::new(400, 10141, "sourced stream name is invalid");
    /// JSMirrorInvalidStreamName
    pub const MIRROR_INVALID_STREAM_NAME: ErrorDef = ErrorDef::new(400, 10142, "mirrored stream name is invalid");
    /// JSMirrorWithFirstSeqErr
    pub const MIRROR_WITH_FIRST_SEQ: ErrorDef = ErrorDef::new(400, 10143, "stream mirrors can not have first sequence configured");
    /// JSSourceMultipleFiltersNotAllowed
    pub const SOURCE_MULTIPLE_FILTERS_NOT_ALLOWED: ErrorDef = ErrorDef::new(400, 10144, "source with multiple subject transforms cannot also have a single subject filter");
    /// JSSourceInvalidSubjectFilter
    pub const SOURCE_INVALID_SUBJECT_FILTER: ErrorDef = ErrorDef::new(400, 10145, "source transform source: {err}");
    /// JSSourceInvalidTransformDestination
    pub const SOURCE_INVALID_TRANSFORM_DESTINATION: ErrorDef = ErrorDef::new(400, 10146, "source transform: {err}");
    /// JSSourceOverlappingSubjectFilters
    pub const SOURCE_OVERLAPPING_SUBJECT_FILTERS: ErrorDef = ErrorDef::new(400, 10147, "source filters can not overlap");
    /// JSConsumerAlreadyExists
    pub const CONSUMER_ALREADY_EXISTS: ErrorDef = ErrorDef::new(400, 10148, "consumer already exists");
    /// JSConsumerDoesNotExist
    pub const CONSUMER_DOES_NOT_EXIST: ErrorDef = ErrorDef::new(400, 10149, "consumer does not exist");
    /// JSMirrorMultipleFiltersNotAllowed
    pub const MIRROR_MULTIPLE_FILTERS_NOT_ALLOWED: ErrorDef = ErrorDef::new(400, 10150, "mirror with multiple subject transforms cannot also have a single subject filter");
    /// JSMirrorInvalidSubjectFilter
    pub const MIRROR_INVALID_SUBJECT_FILTER: ErrorDef = ErrorDef::new(400, 10151, "mirror transform source: {err}");
    /// JSMirrorOverlappingSubjectFilters
    pub const MIRROR_OVERLAPPING_SUBJECT_FILTERS: ErrorDef = ErrorDef::new(400, 10152, "mirror subject filters can not overlap");
    /// JSConsumerInactiveThresholdExcess
    pub const CONSUMER_INACTIVE_THRESHOLD_EXCESS: ErrorDef = ErrorDef::new(400, 10153, "consumer inactive threshold exceeds system limit of {limit}");
    /// JSMirrorInvalidTransformDestination
    pub const MIRROR_INVALID_TRANSFORM_DESTINATION: ErrorDef = ErrorDef::new(400, 10154, "mirror transform: {err}");
    /// JSStreamTransformInvalidSource
    pub const STREAM_TRANSFORM_INVALID_SOURCE: ErrorDef = ErrorDef::new(400, 10155, "stream transform source: {err}");
    /// JSStreamTransformInvalidDestination
    pub const STREAM_TRANSFORM_INVALID_DESTINATION: ErrorDef = ErrorDef::new(400, 10156, "stream transform: {err}");
    /// JSPedanticErrF
    pub const PEDANTIC: ErrorDef = ErrorDef::new(400, 10157, "pedantic mode: {err}");
    /// JSStreamDuplicateMessageConflict
    pub const STREAM_DUPLICATE_MESSAGE_CONFLICT: ErrorDef = ErrorDef::new(409, 10158, "duplicate message id is in process");
    /// JSConsumerPriorityPolicyWithoutGroup
    pub const CONSUMER_PRIORITY_POLICY_WITHOUT_GROUP: ErrorDef = ErrorDef::new(400, 10159, "Setting PriorityPolicy requires at least one PriorityGroup to be set");
    /// JSConsumerInvalidPriorityGroupErr
    pub const CONSUMER_INVALID_PRIORITY_GROUP: ErrorDef = ErrorDef::new(400, 10160, "Provided priority group does not exist for this consumer");
    /// JSConsumerEmptyGroupName
    pub const CONSUMER_EMPTY_GROUP_NAME: ErrorDef = ErrorDef::new(400, 10161, "Group name cannot be an empty string");
    /// JSConsumerInvalidGroupNameErr
    pub const CONSUMER_INVALID_GROUP_NAME: ErrorDef = ErrorDef::new(400, 10162, "Valid priority group name must match A-Z, a-z, 0-9, -_/=)+ and may not exceed 16 characters");
    /// JSStreamExpectedLastSeqPerSubjectNotReady
    pub const STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_NOT_READY: ErrorDef = ErrorDef::new(503, 10163, "expected last sequence per subject temporarily unavailable");
    /// JSStreamWrongLastSequenceConstantErr
    pub const STREAM_WRONG_LAST_SEQUENCE_CONSTANT: ErrorDef = ErrorDef::new(400, 10164, "wrong last sequence");
    /// JSMessageTTLInvalidErr
    pub const MESSAGE_TTL_INVALID: ErrorDef = ErrorDef::new(400, 10165, "invalid per-message TTL");
    /// JSMessageTTLDisabledErr
    pub const MESSAGE_TTL_DISABLED: ErrorDef = ErrorDef::new(400, 10166, "per-message TTL is disabled");
    /// JSStreamTooManyRequests
    pub const STREAM_TOO_MANY_REQUESTS: ErrorDef = ErrorDef::new(429, 10167, "too many requests");
    /// JSMessageIncrDisabledErr
    pub const MESSAGE_INCR_DISABLED: ErrorDef = ErrorDef::new(400, 10168, "message counters is disabled");
    /// JSMessageIncrMissingErr
    pub const MESSAGE_INCR_MISSING: ErrorDef = ErrorDef::new(400, 10169, "message counter increment is missing");
    /// JSMessageIncrPayloadErr
    pub const MESSAGE_INCR_PAYLOAD: ErrorDef = ErrorDef::new(400, 10170, "message counter has payload");
    /// JSMessageIncrInvalidErr
    pub const MESSAGE_INCR_INVALID: ErrorDef = ErrorDef::new(400, 10171, "message counter increment is invalid");
    /// JSMessageCounterBrokenErr
    pub const MESSAGE_COUNTER_BROKEN: ErrorDef = ErrorDef::new(400, 10172, "message counter is broken");
    /// JSMirrorWithCountersErr
    pub const MIRROR_WITH_COUNTERS: ErrorDef = ErrorDef::new(400, 10173, "stream mirrors can not also calculate counters");
    /// JSAtomicPublishDisabledErr
    pub const ATOMIC_PUBLISH_DISABLED: ErrorDef = ErrorDef::new(400, 10174, "atomic publish is disabled");
    /// JSAtomicPublishMissingSeqErr
    pub const ATOMIC_PUBLISH_MISSING_SEQ: ErrorDef = ErrorDef::new(400, 10175, "atomic publish sequence is missing");
    /// JSAtomicPublishIncompleteBatchErr
    pub const ATOMIC_PUBLISH_INCOMPLETE_BATCH: ErrorDef = ErrorDef::new(400, 10176, "atomic publish batch is incomplete");
    /// JSAtomicPublishUnsupportedHeaderBatchErr
    pub const ATOMIC_PUBLISH_UNSUPPORTED_HEADER_BATCH: ErrorDef = ErrorDef::new(400, 10177, "atomic publish unsupported header used: {header}");
    /// JSConsumerPushWithPriorityGroupErr
    pub const CONSUMER_PUSH_WITH_PRIORITY_GROUP: ErrorDef = ErrorDef::new(400, 10178, "priority groups can not be used with push consumers");
    /// JSAtomicPublishInvalidBatchIDErr
    pub const ATOMIC_PUBLISH_INVALID_BATCH_ID: ErrorDef = ErrorDef::new(400, 10179, "atomic publish batch ID is invalid");
    /// JSStreamMinLastSeqErr
    pub const STREAM_MIN_LAST_SEQ: ErrorDef = ErrorDef::new(412, 10180, "min last sequence");
    /// JSConsumerAckPolicyInvalidErr
    pub const CONSUMER_ACK_POLICY_INVALID: ErrorDef = ErrorDef::new(400, 10181, "consumer ack policy invalid");
    /// JSConsumerReplayPolicyInvalidErr
    pub const CONSUMER_REPLAY_POLICY_INVALID: ErrorDef = ErrorDef::new(400, 10182, "consumer replay policy invalid");
    /// JSConsumerAckWaitNegativeErr
    pub const CONSUMER_ACK_WAIT_NEGATIVE: ErrorDef = ErrorDef::new(400, 10183, "consumer ack wait needs to be positive");
    /// JSConsumerBackOffNegativeErr
    pub const CONSUMER_BACK_OFF_NEGATIVE: ErrorDef = ErrorDef::new(400, 10184, "consumer backoff needs to be positive");
    /// JSRequiredApiLevelErr
    pub const REQUIRED_API_LEVEL: ErrorDef = ErrorDef::new(412, 10185, "JetStream minimum api level required");
    /// JSMirrorWithMsgSchedulesErr
    pub const MIRROR_WITH_MSG_SCHEDULES: ErrorDef = ErrorDef::new(400, 10186, "stream mirrors can not also schedule messages");
    /// JSSourceWithMsgSchedulesErr
    pub const SOURCE_WITH_MSG_SCHEDULES: ErrorDef = ErrorDef::new(400, 10187, "stream source can not also schedule messages");
    /// JSMessageSchedulesDisabledErr
    pub const MESSAGE_SCHEDULES_DISABLED: ErrorDef = ErrorDef::new(400, 10188, "message schedules is disabled");
    /// JSMessageSchedulesPatternInvalidErr
    pub const MESSAGE_SCHEDULES_PATTERN_INVALID: ErrorDef = ErrorDef::new(400, 10189, "message schedules pattern is invalid");
    /// JSMessageSchedulesTargetInvalidErr
    pub const MESSAGE_SCHEDULES_TARGET_INVALID: ErrorDef = ErrorDef::new(400, 10190, "message schedules target is invalid");
    /// JSMessageSchedulesTTLInvalidErr
    pub const MESSAGE_SCHEDULES_TTL_INVALID: ErrorDef = ErrorDef::new(400, 10191, "message schedules invalid per-message TTL");
    /// JSMessageSchedulesRollupInvalidErr
    pub const MESSAGE_SCHEDULES_ROLLUP_INVALID: ErrorDef = ErrorDef::new(400, 10192, "message schedules invalid rollup");
    /// JSStreamExpectedLastSeqPerSubjectInvalid
    pub const STREAM_EXPECTED_LAST_SEQ_PER_SUBJECT_INVALID: ErrorDef = ErrorDef::new(400, 10193, "missing sequence for expected last sequence per subject");
    /// JSStreamOfflineReasonErrF
    pub const STREAM_OFFLINE_REASON: ErrorDef = ErrorDef::new(500, 10194, "stream is offline: {err}");
    /// JSConsumerOfflineReasonErrF
    pub const CONSUMER_OFFLINE_REASON: ErrorDef = ErrorDef::new(500, 10195, "consumer is offline: {err}");
    /// JSConsumerPriorityGroupWithPolicyNone
    pub const CONSUMER_PRIORITY_GROUP_WITH_POLICY_NONE: ErrorDef = ErrorDef::new(400, 10196, "consumer can not have priority groups when policy is none");
    /// JSConsumerPinnedTTLWithoutPriorityPolicyNone
    pub const CONSUMER_PINNED_TTL_WITHOUT_PRIORITY_POLICY_NONE: ErrorDef = ErrorDef::new(400, 10197, "PinnedTTL cannot be set when PriorityPolicy is none");
    /// JSMirrorWithAtomicPublishErr
    pub const MIRROR_WITH_ATOMIC_PUBLISH: ErrorDef = ErrorDef::new(400, 10198, "stream mirrors can not also use atomic publishing");
    /// JSAtomicPublishTooLargeBatchErrF
    pub const ATOMIC_PUBLISH_TOO_LARGE_BATCH: ErrorDef = ErrorDef::new(400, 10199, "atomic publish batch is too large: {size}");
    /// JSAtomicPublishInvalidBatchCommitErr
    pub const ATOMIC_PUBLISH_INVALID_BATCH_COMMIT: ErrorDef = ErrorDef::new(400, 10200, "atomic publish batch commit is invalid");
    /// JSAtomicPublishContainsDuplicateMessageErr
    pub const ATOMIC_PUBLISH_CONTAINS_DUPLICATE_MESSAGE: ErrorDef = ErrorDef::new(400, 10201, "atomic publish batch contains duplicate message id");
    /// JSClusterServerMemberChangeInflightErr
    pub const CLUSTER_SERVER_MEMBER_CHANGE_INFLIGHT: ErrorDef = ErrorDef::new(400, 10202, "cluster member change is in progress");
    /// JSMessageSchedulesSourceInvalidErr
    pub const MESSAGE_SCHEDULES_SOURCE_INVALID: ErrorDef = ErrorDef::new(400, 10203, "message schedules source is invalid");
    /// JSConsumerInvalidResetErr
    pub const CONSUMER_INVALID_RESET: ErrorDef = ErrorDef::new(400, 10204, "invalid reset: {err}");
    /// JSBatchPublishDisabledErr
    pub const BATCH_PUBLISH_DISABLED: ErrorDef = ErrorDef::new(400, 10205, "batch publish is disabled");
    /// JSBatchPublishInvalidPatternErr
    pub const BATCH_PUBLISH_INVALID_PATTERN: ErrorDef = ErrorDef::new(400, 10206, "batch publish pattern is invalid");
    /// JSBatchPublishInvalidBatchIDErr
    pub const BATCH_PUBLISH_INVALID_BATCH_ID: ErrorDef = ErrorDef::new(400, 10207, "batch publish ID is invalid");
    /// JSBatchPublishUnknownBatchIDErr
    pub const BATCH_PUBLISH_UNKNOWN_BATCH_ID: ErrorDef = ErrorDef::new(400, 10208, "batch publish ID unknown");
    /// JSMirrorWithBatchPublishErr
    pub const MIRROR_WITH_BATCH_PUBLISH: ErrorDef = ErrorDef::new(400, 10209, "stream mirrors can not also use batch publishing");
    /// JSAtomicPublishTooManyInflight
    pub const ATOMIC_PUBLISH_TOO_MANY_INFLIGHT: ErrorDef = ErrorDef::new(429, 10210, "atomic publish too many inflight");
    /// JSBatchPublishTooManyInflight
    pub const BATCH_PUBLISH_TOO_MANY_INFLIGHT: ErrorDef = ErrorDef::new(429, 10211, "batch publish too many inflight");
    /// JSMessageSchedulesSchedulerInvalidErr
    pub const MESSAGE_SCHEDULES_SCHEDULER_INVALID: ErrorDef = ErrorDef::new(400, 10212, "message schedules invalid scheduler");
    /// JSMirrorDurableConsumerCfgInvalid
    pub const MIRROR_DURABLE_CONSUMER_CFG_INVALID: ErrorDef = ErrorDef::new(400, 10213, "stream mirror consumer config is invalid");
    /// JSMirrorConsumerRequiresAckFCErr
    pub const MIRROR_CONSUMER_REQUIRES_ACK_FC: ErrorDef = ErrorDef::new(400, 10214, "stream mirror consumer requires flow control ack policy");
    /// JSSourceDurableConsumerCfgInvalid
    pub const SOURCE_DURABLE_CONSUMER_CFG_INVALID: ErrorDef = ErrorDef::new(400, 10215, "stream source consumer config is invalid");
    /// JSSourceDurableConsumerDuplicateDetected
    pub const SOURCE_DURABLE_CONSUMER_DUPLICATE_DETECTED: ErrorDef = ErrorDef::new(400, 10216, "duplicate stream source consumer detected");
    /// JSSourceConsumerRequiresAckFCErr
    pub const SOURCE_CONSUMER_REQUIRES_ACK_FC: ErrorDef = ErrorDef::new(400, 10217, "stream source consumer requires flow control ack policy");
    /// JSConsumerAckFCRequiresPushErr
    pub const CONSUMER_ACK_FC_REQUIRES_PUSH: ErrorDef = ErrorDef::new(400, 10218, "flow control ack policy requires a push based consumer");
    /// JSConsumerAckFCRequiresFCErr
    pub const CONSUMER_ACK_FC_REQUIRES_FC: ErrorDef = ErrorDef::new(400, 10219, "flow control ack policy requires flow control");
    /// JSConsumerAckFCRequiresMaxAckPendingErr
    pub const CONSUMER_ACK_FC_REQUIRES_MAX_ACK_PENDING: ErrorDef = ErrorDef::new(400, 10220, "flow control ack policy requires max ack pending");
    /// JSConsumerAckFCRequiresNoAckWaitErr
    pub const CONSUMER_ACK_FC_REQUIRES_NO_ACK_WAIT: ErrorDef = ErrorDef::new(400, 10221, "flow control ack policy requires unset ack wait");
    /// JSConsumerAckFCRequiresNoMaxDeliverErr
    pub const CONSUMER_ACK_FC_REQUIRES_NO_MAX_DELIVER: ErrorDef = ErrorDef::new(400, 10222, "flow control ack policy requires unset max deliver");
    /// JSMessageSchedulesTimeZoneInvalidErr
    pub const MESSAGE_SCHEDULES_TIME_ZONE_INVALID: ErrorDef = ErrorDef::new(400, 10223, "message schedules time zone is invalid");
    /// JSClusterRescueErr
    pub const CLUSTER_RESCUE: ErrorDef = ErrorDef::new(400, 10224, "JetStream system rescue not applied: {err}");
    /// JSConsumerStreamIdentityMismatchF
    pub const CONSUMER_STREAM_IDENTITY_MISMATCH: ErrorDef = ErrorDef::new(400, 10225, "consumer's stream identity does not match: {msg}");
    /// JSStreamReconfigureInProgressErr
    pub const STREAM_RECONFIGURE_IN_PROGRESS: ErrorDef = ErrorDef::new(400, 10226, "stream reconfiguration already in progress");
    /// JSMessageSourceHdrNotAllowedErr
    pub const MESSAGE_SOURCE_HDR_NOT_ALLOWED: ErrorDef = ErrorDef::new(400, 10227, "message stream source header is not allowed");
}
