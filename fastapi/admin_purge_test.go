package fastapi

import "testing"

// TestAdminBetaOffRetriesAFailedPurge: turning the device-evidence beta off
// stores the flag and then deletes the beta's samples and challenges (SPEC
// §8). When that deletion fails the operator gets an error and retries the
// same PATCH; the retry must delete them again (or fail again), not answer
// 200 because the flag is already off while the samples are still kept.
func TestAdminBetaOffRetriesAFailedPurge(t *testing.T) {
	e := newChallengeEnv(t, true, "https://shop.example")
	if err := e.srv.deps.Challenges.Stop(); err != nil { // every purge now fails
		t.Fatal(err)
	}
	uri := "/admin/v1/accounts/" + e.acct.View.ID
	body := []byte(`{"device_evidence_beta":false}`)
	if ctx := e.do("PATCH", uri, "Bearer adm", body); ctx.Response.StatusCode() == 200 {
		t.Fatalf("a failed purge answered 200: %s", ctx.Response.Body())
	}
	if ctx := e.do("PATCH", uri, "Bearer adm", body); ctx.Response.StatusCode() == 200 {
		t.Fatalf("the retry answered 200 without purging: %s", ctx.Response.Body())
	}
}
