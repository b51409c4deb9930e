//! batch/v1 printers: jobs and cronjobs (upstream's `printJob`, `printCronJob`).

use jiff::Timestamp;
use serde_json::{Value, json};

use super::duration::human_duration;
use super::value::{
    age, array_at, bool_ptr, deleting, format_label_selector, int_at, layout_containers, name, opt_bool,
    opt_int, opt_str, present, since, str_at, time_at,
};
use super::{AGE, CONTAINERS, Column, IMAGES, NAME, Row};

const SELECTOR_DOC: &str = "A label query over pods that should match the pod count. Normally, the system sets this field for you. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-selectors";

pub(super) const JOB_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Status", "Status of the job."),
    Column::string(
        "Completions",
        "The number of pods which reached phase Succeeded. The value increases monotonically for a given spec. However, it may decrease in reaction to scale down of elastic indexed jobs.",
    ),
    Column::string("Duration", "Time required to complete the job."),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string("Selector", SELECTOR_DOC).wide(),
];

/// Upstream's `hasJobCondition`: the first condition of `kind` has status `True`.
fn has_condition(job: &Value, kind: &str) -> bool {
    array_at(job, &["status", "conditions"])
        .iter()
        .find(|c| str_at(c, &["type"]) == kind)
        .is_some_and(|c| str_at(c, &["status"]) == "True")
}

pub(super) fn job(object: &Value, now: Timestamp) -> Row {
    let succeeded = int_at(object, &["status", "succeeded"]);
    let completions = match opt_int(object, &["spec", "completions"]) {
        Some(completions) => format!("{succeeded}/{completions}"),
        None => match opt_int(object, &["spec", "parallelism"]).unwrap_or(0) {
            parallelism if parallelism > 1 => format!("{succeeded}/1 of {parallelism}"),
            _ => format!("{succeeded}/1"),
        },
    };
    // No zero-time check here, unlike ages: a start time present but zero would measure from year 1.
    let start = present(object, &["status", "startTime"]).then(|| time_at(object, &["status", "startTime"]));
    let duration = match start {
        None => String::new(),
        Some(start) => {
            let start = start.unwrap_or(Timestamp::MIN);
            let end = if present(object, &["status", "completionTime"]) {
                time_at(object, &["status", "completionTime"]).unwrap_or(Timestamp::MIN)
            } else {
                now
            };
            human_duration(end.duration_since(start))
        }
    };
    let status = if has_condition(object, "Complete") {
        "Complete"
    } else if has_condition(object, "Failed") {
        "Failed"
    } else if deleting(object) {
        "Terminating"
    } else if has_condition(object, "Suspended") {
        "Suspended"
    } else if has_condition(object, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (names, images) = layout_containers(array_at(object, &["spec", "template", "spec", "containers"]));
    Row::new(vec![
        json!(name(object)),
        json!(status),
        json!(completions),
        json!(duration),
        json!(age(object, now)),
        json!(names),
        json!(images),
        json!(format_label_selector(object, &["spec", "selector"])),
    ])
}

pub(super) const CRON_JOB_COLUMNS: &[Column] = &[
    NAME,
    Column::string("Schedule", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
    Column::string(
        "Timezone",
        "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones. If not specified, this will default to the time zone of the kube-controller-manager process. The set of valid time zone names and the time zone offset is loaded from the system-wide time zone database by the API server during CronJob validation and the controller manager during execution. If no system-wide time zone database can be found a bundled version of the database is used instead. If the time zone name becomes invalid during the lifetime of a CronJob or due to a change in host configuration, the controller will stop creating new new Jobs and will create a system event with the reason UnknownTimeZone. More information can be found in https://kubernetes.io/docs/concepts/workloads/controllers/cron-jobs/#time-zones",
    ),
    Column::new(
        "Suspend",
        "boolean",
        "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions.  Defaults to false.",
    ),
    Column::new("Active", "integer", "A list of pointers to currently running jobs."),
    Column::string("Last Schedule", "Information when was the last time the job was successfully scheduled."),
    AGE,
    CONTAINERS,
    IMAGES,
    Column::string("Selector", SELECTOR_DOC).wide(),
];

pub(super) fn cron_job(object: &Value, now: Timestamp) -> Row {
    let last_schedule = if present(object, &["status", "lastScheduleTime"]) {
        since(time_at(object, &["status", "lastScheduleTime"]), now)
    } else {
        "<none>".to_owned()
    };
    let (names, images) = layout_containers(array_at(
        object,
        &["spec", "jobTemplate", "spec", "template", "spec", "containers"],
    ));
    Row::new(vec![
        json!(name(object)),
        json!(str_at(object, &["spec", "schedule"])),
        json!(opt_str(object, &["spec", "timeZone"]).unwrap_or("<none>")),
        // Decoding defaults suspend to false.
        json!(bool_ptr(Some(opt_bool(object, &["spec", "suspend"]).unwrap_or(false)))),
        json!(array_at(object, &["status", "active"]).len()),
        json!(last_schedule),
        json!(age(object, now)),
        json!(names),
        json!(images),
        json!(format_label_selector(object, &["spec", "jobTemplate", "spec", "selector"])),
    ])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::test_support::{cells, headers};

    #[test]
    fn jobs() {
        assert_eq!(
            headers("batch", "jobs"),
            ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE", "CONTAINERS", "IMAGES", "SELECTOR"]
        );
        let done = json!({
            "metadata": {"name": "pi", "creationTimestamp": "2025-06-01T11:00:00Z"},
            "spec": {"completions": 1, "parallelism": 1, "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}},
                     "template": {"spec": {"containers": [{"name": "pi", "image": "perl:5.34"}]}}},
            "status": {"succeeded": 1, "startTime": "2025-06-01T11:00:05Z", "completionTime": "2025-06-01T11:00:43Z",
                       "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}
        });
        assert_eq!(
            cells("batch", "jobs", &done),
            [
                json!("pi"),
                json!("Complete"),
                json!("1/1"),
                json!("38s"),
                json!("60m"),
                json!("pi"),
                json!("perl:5.34"),
                json!("batch.kubernetes.io/controller-uid=u-1")
            ]
        );
        let running = json!({
            "metadata": {"name": "work", "creationTimestamp": "2025-06-01T11:50:00Z"},
            "spec": {"parallelism": 3}, "status": {"active": 3, "succeeded": 2, "startTime": "2025-06-01T11:50:00Z"}
        });
        let c = cells("batch", "jobs", &running);
        assert_eq!(c[1..4], [json!("Running"), json!("2/1 of 3"), json!("10m")]);
        let status = |conditions: serde_json::Value, deleting: bool| {
            let mut job = json!({"metadata": {"name": "j"}, "spec": {"completions": 5}, "status": {"conditions": conditions}});
            if deleting {
                job["metadata"]["deletionTimestamp"] = json!("2025-06-01T11:59:00Z");
            }
            cells("batch", "jobs", &job)[1].clone()
        };
        assert_eq!(status(json!([{"type": "Failed", "status": "True"}]), true), "Failed");
        assert_eq!(status(json!([{"type": "Suspended", "status": "True"}]), true), "Terminating");
        assert_eq!(status(json!([{"type": "Suspended", "status": "True"}]), false), "Suspended");
        assert_eq!(status(json!([{"type": "FailureTarget", "status": "True"}]), false), "FailureTarget");
        assert_eq!(status(json!([{"type": "Complete", "status": "False"}]), false), "Running");
        let fresh = cells("batch", "jobs", &json!({"metadata": {"name": "f"}, "spec": {"completions": 5}}));
        assert_eq!(fresh[1..4], [json!("Running"), json!("0/5"), json!("")]);
        assert_eq!(cells("batch", "jobs", &json!({}))[2], "0/1");
    }

    #[test]
    fn cron_jobs() {
        assert_eq!(
            headers("batch", "cronjobs"),
            [
                "NAME",
                "SCHEDULE",
                "TIMEZONE",
                "SUSPEND",
                "ACTIVE",
                "LAST SCHEDULE",
                "AGE",
                "CONTAINERS",
                "IMAGES",
                "SELECTOR"
            ]
        );
        let cj = json!({
            "metadata": {"name": "hello", "creationTimestamp": "2025-05-31T12:00:00Z"},
            "spec": {"schedule": "*/5 * * * *", "timeZone": "Etc/UTC", "suspend": false,
                     "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "hello", "image": "busybox:1.36"}]}}}}},
            "status": {"active": [{"kind": "Job", "name": "hello-29145600"}], "lastScheduleTime": "2025-06-01T11:55:00Z"}
        });
        assert_eq!(
            cells("batch", "cronjobs", &cj),
            [
                json!("hello"),
                json!("*/5 * * * *"),
                json!("Etc/UTC"),
                json!("False"),
                json!(1),
                json!("5m"),
                json!("24h"),
                json!("hello"),
                json!("busybox:1.36"),
                json!("<none>")
            ]
        );
        let idle = json!({"metadata": {"name": "nightly"}, "spec": {"schedule": "@daily", "suspend": true}});
        assert_eq!(
            cells("batch", "cronjobs", &idle)[1..7],
            [json!("@daily"), json!("<none>"), json!("True"), json!(0), json!("<none>"), json!("<unknown>")]
        );
        assert_eq!(cells("batch", "cronjobs", &json!({"spec": {}}))[3], "False", "suspend defaults to false");
    }
}
